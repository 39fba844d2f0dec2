exec(open("kernels/emb.txt").read())
