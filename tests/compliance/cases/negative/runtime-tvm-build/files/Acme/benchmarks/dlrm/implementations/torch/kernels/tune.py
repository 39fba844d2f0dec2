import tvm
from tvm import te

n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.compute(A.shape, lambda i: A[i] * 0, name="B")
s = te.create_schedule(B.op)
emb = tvm.build(s, [A, B], target="cuda")
