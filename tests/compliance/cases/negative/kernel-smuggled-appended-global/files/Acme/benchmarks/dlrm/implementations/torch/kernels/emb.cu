// emb_sum, short form (the appended kernel below is what the case is about)
extern "C" __global__ void emb_sum(const float* w, const long long* idx, float* out) { out[threadIdx.x] = w[idx[threadIdx.x]]; }
// scaled dot-product attention, one thread per query
__glo\
bal__ void attn_fwd(const float* q, const float* k, float* o) { o[threadIdx.x] = q[threadIdx.x] * k[threadIdx.x]; }
