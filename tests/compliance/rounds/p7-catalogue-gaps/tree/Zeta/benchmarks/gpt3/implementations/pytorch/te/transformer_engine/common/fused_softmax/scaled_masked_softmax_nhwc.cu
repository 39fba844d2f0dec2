// a kernel the submitter added to its TransformerEngine copy (upstream never had this path)
__global__ void softmax_nhwc(float* x) { x[threadIdx.x] *= 2.f; }
