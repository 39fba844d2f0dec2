__global__ void attn(float* x) { x[threadIdx.x] = 0.f; }
