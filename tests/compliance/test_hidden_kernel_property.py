"""Property: a tree hiding one custom kernel or binary never passes (issue 40 item 8; issue 50
classes 4 and 5: every kernel-entry spelling and run-time compiler, and text encoded as a loader
decodes it).

Hypothesis builds the example tree plus one hidden kernel, in any form the recognisers know
(compliance/recognisers.py), under any name that form is a kernel under, in any place
(version-control and cache directories, build directories, deep chains), directly or
behind a symlink whose target hides under a data name, padded so that the marker straddles
a chunk edge of the streamed read. The verdict must never be PASS.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compliance import inventory
from compliance.engine import run_check
from tests.compliance.treeutil import BASE, fake_binary

IMPL = "Acme/benchmarks/dlrm/implementations/torch"
ELF = fake_binary("elf-so")

# (content, names it is a kernel under): code forms need a code name, kernel source any name.
CODE_FORMS = [
    "import triton\n\n@triton.jit\ndef k(x):\n    pass\n",
    "from triton import jit\n\n@jit\ndef k(x):\n    pass\n",
    "import triton\n\n@triton . jit\ndef k(x):\n    pass\n",
    "import triton as t\n\n@t.jit\ndef k(x):\n    pass\n",
    "from numba import cuda\n\n@cuda.jit\ndef k(x):\n    x[0] = 1\n",
    "import cupy\nk = cupy.RawKernel(SRC, 'k')\n",
    "import cupy as cp\nk = cp.ElementwiseKernel('float32 x', 'float32 y', 'y = x', 'k')\n",
    "import torch\nf = torch.cuda.jiterator._create_jit_fn(SRC)\n",
    "from torch.utils.cpp_extension import load_inline as li\nm = li('k', '', SRC)\n",
    "import torch.utils.cpp_extension as ce\nm = ce.load(name='k', sources=['k.cu'])\n",
    "from cuda.bindings import nvrtc\nerr, prog = nvrtc.nvrtcCreateProgram(SRC, b'k.cu', 0, [], [])\n",
    "import ctypes\nlib = ctypes.CDLL('libnvrtc.so.12')\n",
    "from cuda import nvrtc\n",
    "import cupy\nm = cupy.RawModule(code=SRC)\n",
    "import tvm\nm = tvm.build(s, [A], target='cuda')\n",
    "import mxnet as mx\nm = mx.rtc.CudaModule(SRC)\n",
    "from cuda.core.experimental import Program\n",
]
RUNTIME_FORMS = [
    "import triton\n\n@triton.jit\ndef k(x):\n    pass\n",
    "import triton\n\n@triton.autotune(configs=[])\n@triton.jit\ndef k(x):\n    pass\n",
    "from numba import cuda\n\n@cuda.jit\ndef k(x):\n    x[0] = 1\n",
    "import cupy\nk = cupy.ElementwiseKernel('float32 x', 'float32 y', 'y = x', 'k')\n",
    "import torch\nf = torch.cuda.jiterator._create_jit_fn(SRC)\n",
    "from cuda.bindings import nvrtc\nerr, prog = nvrtc.nvrtcCreateProgram(SRC, b'k.cu', 0, [], [])\n",
    "import tvm\nm = tvm.build(s, [A], target='cuda')\n",
]
"""Run-time compilers a ``.txt``, ``.log`` or ``.csv`` run by ``exec``/``runpy`` may call: found under any name."""
SOURCE_FORMS = [
    "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    "__attribute__((global)) void k(float* x) { x[0] = 1.0f; }\n",
    "__glo\\\nbal__ void k(float* x) { x[0] = 1.0f; }\n",
    ".version 7.0\n.target sm_80\n.visible .entry k(\n)\n{\n ret;\n}\n",
    "__location__(global) void k(float* x) { x[0] = 1.0f; }\n",
    "__annotate__(global) void k(float* x) { x[0] = 1.0f; }\n",
    "[[gnu::global]] void k(float* x) { x[0] = 1.0f; }\n",
    "void __attribute__((noinline, global)) k(float* x) { x[0] = 1.0f; }\n",
    "__glo\\ \t\nbal__ void k(float* x) { x[0] = 1.0f; }\n",
    "#define KQ __location__(global)\nKQ void k(float* x) { x[0] = 1.0f; }\n",
]
ENCODED_FORMS = [
    b'{"k": "\\u005f\\u005fglobal\\u005f\\u005f void k(float* x) { x[0] = 1.0f; }"}\n',
    b'{"k": "\\\\u005f\\\\u005fglobal__ void k(float* x) { x[0] = 1.0f; }"}\n',
    b"K = '\\137\\137global\\137\\137 void k(float* x) { x[0] = 1.0f; }'\n",
    b'{"cells": [{"source": ["import triton\\n", "@triton\\u002ejit\\n", "def k(x):\\n", "    pass\\n"]}]}\n',
    "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n".encode("utf-16"),
    "import triton\n\n@triton.jit\ndef k(x):\n    pass\n".encode("utf-32"),
    b'{"k": "' + base64.b64encode(b'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n' * 2) + b'"}\n',
]
"""Kernel text as a loader decodes it (JSON and Python escapes, UTF-16/32 with a byte-order mark,
base64): found under any name."""
BINARY_FORMS = [ELF, b"#" + ELF, fake_binary("zip"), fake_binary("gzip"), fake_binary("cubin"),
                ("LIB = '" + base64.b64encode(ELF).decode() + "'\n").encode()]
CODE_NAMES = ["fused.py", "k.py", "kernel.cu", "k.cpp", "run", "notes.md"]
ANY_NAMES = CODE_NAMES + ["data.txt", "results.json", "k.log", ".ninja_log", "build.ninja", "x.pyc"]
PLACES = ["", "kernels", ".git/objects/ab", ".hg/store", ".svn/pristine", "__pycache__", "fastemb.egg-info",
          "build", "build/temp.linux-x86_64-3.10", "build/lib.linux-x86_64-3.10", "third_party/lib",
          "submodules/dep", "a/b/c/d/e/f/g/h"]

forms = st.one_of(
    st.tuples(st.sampled_from(CODE_FORMS).map(str.encode), st.sampled_from(CODE_NAMES)),
    st.tuples(st.sampled_from(SOURCE_FORMS).map(str.encode), st.sampled_from(ANY_NAMES)),
    st.tuples(st.sampled_from(RUNTIME_FORMS).map(str.encode), st.sampled_from(ANY_NAMES)),
    st.tuples(st.sampled_from(ENCODED_FORMS), st.sampled_from(ANY_NAMES)),
    st.tuples(st.sampled_from(BINARY_FORMS), st.sampled_from(ANY_NAMES)),
)


def _hide(tree: Path, content: bytes, name: str, place: str, via_link: bool, padding: int) -> None:
    if padding and not content.startswith((b"\x7fELF", b"#\x7fELF", b"PK", b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff")):
        content = b"#" * padding + b"\n" + content  # the marker lands across a chunk edge
    where = tree / IMPL / place
    where.mkdir(parents=True, exist_ok=True)
    if not via_link:
        (where / name).write_bytes(content)
        return
    hidden = tree / IMPL / ".git" / "lfs" / "blob.txt"  # a data name under a VCS directory
    hidden.parent.mkdir(parents=True, exist_ok=True)
    hidden.write_bytes(content)
    os.symlink(os.path.relpath(hidden, where), where / name)


@pytest.mark.filterwarnings("ignore")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=forms, place=st.sampled_from(PLACES), via_link=st.booleans(),
       padding=st.sampled_from([0, 0, 65_530, 65_536 * 3 - 5]))
def test_a_hidden_kernel_never_passes(form: tuple[bytes, str], place: str, via_link: bool, padding: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory, "CHUNK_BYTES", 65_536)  # small chunks: edges without big files
    content, name = form
    with tempfile.TemporaryDirectory() as work:
        tree = Path(work) / "tree"
        shutil.copytree(BASE, tree, symlinks=True)
        _hide(tree, content, name, place, via_link, padding)
        report = run_check(tree)
        detail = "\n".join(f"{f.rule_id} {f.severity.value} {f.path}" for f in report.findings)
        assert not report.passed, f"{name} in {place!r} (link: {via_link}) passed:\n{detail}"
