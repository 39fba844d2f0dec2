from triton import jit

@jit
def k(x):
    pass
