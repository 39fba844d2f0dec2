import torch
f = torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")
