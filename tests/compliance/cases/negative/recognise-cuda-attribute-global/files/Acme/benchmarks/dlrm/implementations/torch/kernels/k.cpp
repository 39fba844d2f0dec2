__attribute__((global)) void hidden(float* x) { x[0] = 1.0f; }
