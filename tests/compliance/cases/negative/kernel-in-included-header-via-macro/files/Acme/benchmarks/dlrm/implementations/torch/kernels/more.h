KQ void evil(float* x) { x[0] = 0.f; }
