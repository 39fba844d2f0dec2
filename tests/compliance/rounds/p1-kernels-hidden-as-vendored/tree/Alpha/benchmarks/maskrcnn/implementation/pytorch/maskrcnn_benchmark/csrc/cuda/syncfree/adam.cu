__global__ void syncfree_adam(float* x) { x[threadIdx.x] = 1.f; }
