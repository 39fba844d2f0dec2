int f(int x) { int y; asm("mov.u32 %0, %1;" : "=r"(y) : "r"(x)); return y; }
