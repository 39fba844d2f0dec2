__global__ void dali_box_iou(float* x) { x[threadIdx.x] = 1.f; }
