// stands for upstream's file of this path (a path TransformerEngine has had)
__global__ void softmax_stub(float* x) { x[threadIdx.x] = 0.f; }
