__global__ void attn(float* q, float* k, float* o) { o[threadIdx.x] = q[threadIdx.x] * k[threadIdx.x]; }
