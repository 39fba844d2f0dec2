import runpy

runpy.run_path("kernels/emb.log")
