import cupy
mod = cupy.RawModule(code=open("k.txt").read())
