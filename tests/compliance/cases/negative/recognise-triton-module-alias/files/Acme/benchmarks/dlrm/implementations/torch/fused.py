import triton as tr

@tr.jit
def k(x):
    pass
