from numba import cuda

@cuda.jit
def k(x):
    x[0] = 1
