__glo\
bal__ void hidden(float* x) { x[0] = 1.0f; }
