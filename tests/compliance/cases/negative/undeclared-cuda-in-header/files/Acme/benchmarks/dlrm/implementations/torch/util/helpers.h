#pragma once
__global__ void hidden(float* x) { x[0] = 1; }
