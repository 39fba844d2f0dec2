"""Names of the kernel functions a source defines (CUDA ``__global__``, Triton ``@triton.jit``).

Shared by ``compliance manifest draft`` (which proposes entry symbols) and the declaration
check (a declared kernel's sources define exactly the kernels it declares). Comments are
removed first, so a ``__global__`` in a comment defines nothing; a line continuation inside
the keyword (``__glo\\<newline>bal__``) is joined as the compiler's preprocessor joins it.
"""

from __future__ import annotations

import re

GLOBAL = re.compile(rb"(?:__global__|__attribute__\s*\(\(\s*global\s*\)\))\s+(?:[\w:<>,*&\s]+?\s+[*&]*)?(\w+)\s*\(")
LAUNCH_BOUNDS = re.compile(rb"__launch_bounds__\s*\([^)]*\)")
TRITON = re.compile(rb"@\s*(?:triton\s*\.\s*)?jit\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")
_C_COMMENTS = re.compile(rb"/\*.*?\*/|//[^\n]*", re.S)
_PY_COMMENTS = re.compile(rb"#[^\n]*")


def kernel_functions(data: bytes, python: bool = False) -> list[str]:
    """Kernel function names defined in ``data`` (a C/C++/CUDA source, or Python when ``python``)."""
    if python:
        return [m.group(1).decode() for m in TRITON.finditer(_PY_COMMENTS.sub(b"", data))]
    code = LAUNCH_BOUNDS.sub(b"", _C_COMMENTS.sub(b"", data.replace(b"\\\r\n", b"").replace(b"\\\n", b"")))
    return [m.group(1).decode() for m in GLOBAL.finditer(code)]
