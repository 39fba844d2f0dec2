// fast path
__annotate__(global) void fast(float* x) { x[0] = 0.f; }
