import json

from cuda.bindings import nvrtc

SOURCE = json.load(open("kernels/kernels.json"))["emb"]
err, program = nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"emb.cu", 0, [], [])
