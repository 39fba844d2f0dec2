// Prints the -gencode flag for the first GPU (host code only).
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        return 1;
    }
    std::printf("-gencode arch=compute_%d%d,code=sm_%d%d\n", prop.major, prop.minor, prop.major, prop.minor);
    return 0;
}
