from torch.utils.cpp_extension import load_inline

mod = load_inline(name='m', cpp_sources=['int f() { return 1; }'])
