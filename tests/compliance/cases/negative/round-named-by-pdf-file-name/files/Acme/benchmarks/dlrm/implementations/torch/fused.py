import triton

@triton.jit
def k(x):
    pass
