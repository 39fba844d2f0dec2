// LARS update for the MXNet ResNet (modelled, not copied).
__global__ void lars_update(float* w, const float* g, float lr, float eta, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * eta * g[i];
}
