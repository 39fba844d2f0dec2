// emb_sum, short form (the appended kernel below is what the case is about)
extern "C" __global__ void emb_sum(const float* w, const long long* idx, float* out) { out[threadIdx.x] = w[idx[threadIdx.x]]; }
// __global__ void attn_fwd(float* x);
__global__ void emb_sum_backward(float* g) { g[threadIdx.x] = 0.f; }
