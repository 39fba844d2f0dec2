import triton


@triton.jit
def k(x_ptr):
    pass
