"""The preprocessor's view of C, C++ and CUDA (issue 50 class 4): what the compiler takes for a kernel
entry is one, what it takes for a comment or a literal is not, and hostile macros stay bounded."""

from __future__ import annotations

import time

import pytest

from compliance.kernel_symbols import EXHAUSTED, kernel_functions
from compliance.preprocessor import kernel_line, logical_text

KERNELS = {
    b'extern "C" __global__ void emb(float* x) {}\n': ["emb"],
    b"__location__(global) void k(float* x) {}": ["k"],
    b"__annotate__( global ) void k(float* x) {}": ["k"],
    b"__glo\\  \nbal__ void k(float* x) {}": ["k"],
    b"#define KQ __global__\nKQ void k(float* x) {}": ["k"],
    b"#define G(a,b) a##b\nG(__glo,bal__) void k(float* x) {}": ["k"],
    b"%:define KQ __global__\nKQ void k(float* x) {}": ["k"],
    b"template <typename T> __global__ void __launch_bounds__(256, 2) k(T* x) {}": ["k"],
    b"void __attribute__((noinline, global)) k(float* x) {}": ["k"],
    b"void k [[gnu::global]] (float* x) {}": ["k"],
    b"void k(float* x) __attribute__((global));": ["k"],
    b"#define KERNEL(name) __global__ void name(float* x)\nKERNEL(evil) { x[0] = 1; }": ["evil"],
    b"#define A B\n#define B __location__(C)\n#define C global\nA void k() {}": ["k"],
    b"int a = 1'000; __global__ void k() {} //'": ["k"],  # a digit separator is no character literal
    b"/* a */ __global__ /* b */ void /* c */ k(float* x) {}": ["k"],
}
NOT_KERNELS = [
    b'// __global__ void c(float*)\n/* __global__ void d() */\nconst char* s = "__global__ void s()";\n',
    b"const char* r = R\"x(\n__global__ void raw() {}\n)x\";\n",
    b"#if 0\n#endif\nint global = 1; void f(int global);\n",
]


@pytest.mark.parametrize("source", list(KERNELS))
def test_kernels_as_the_compiler_sees_them(source: bytes) -> None:
    assert kernel_functions(source) == KERNELS[source]
    assert kernel_line(source) is not None


@pytest.mark.parametrize("source", NOT_KERNELS)
def test_comments_literals_and_identifiers_are_no_kernels(source: bytes) -> None:
    assert kernel_functions(source) == []
    assert kernel_line(source) is None


def test_a_stringified_spelling_defines_no_kernel_function() -> None:
    source = b"#define STR(x) #x\nconst char* s = STR(__global__ void k());\n"
    assert kernel_functions(source) == []
    assert kernel_line(source) == 2  # the recogniser errs on the safe side: a spelling in code


def test_line_numbers_survive_splices_and_comments() -> None:
    source = b"/* one\ntwo */ int a = \\\n  1;\n// x\n__global__ void k() {}\n"
    assert logical_text(source).count(b"\n") == source.count(b"\n")
    assert kernel_line(source) == 5


def test_a_macro_bomb_is_bounded_and_counts_as_a_kernel() -> None:
    bomb = b"#define A0 x x\n" + b"".join(b"#define A%d A%d A%d\n" % (i, i - 1, i - 1) for i in range(1, 64))
    start = time.perf_counter()
    assert kernel_functions(bomb + b"A63 global\n") == [EXHAUSTED]
    assert kernel_line(bomb + b"A63 global\n") is not None
    assert time.perf_counter() - start < 30


def test_a_large_source_without_macros_is_not_tokenised() -> None:
    source = \
        b"__global__ void k(float* x) {}\n" + b"x = y + z;\n" * 400_000
    start = time.perf_counter()
    assert kernel_functions(source) == ["k"]
    assert time.perf_counter() - start < 10
