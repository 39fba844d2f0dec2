__global__ void g() {}
