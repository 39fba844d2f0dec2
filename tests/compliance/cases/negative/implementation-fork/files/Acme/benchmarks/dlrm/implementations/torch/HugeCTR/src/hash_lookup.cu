// the fork's own kernel (fixture)
__global__ void hash_lookup(const long long* keys, int* slots, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) slots[i] = (int)(keys[i] % 1024);
}
