"""The fast scan of every byte equals the plain one, and the walk gives the same result in one
process or spread over workers (issue 39's speed target, issue 40's "every file examined").

The references here are the scans as they were before the literal search: one ``bytes.find``
per literal of every marker family, and one ``bytes.find`` per base64 needle over all the data.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compliance import inventory, recognisers
from compliance.inventory import walk_tree
from compliance.parallel import OrderedWork
from compliance.recognisers import (
    CODE_MARKERS,
    DATA_MARKER_SET,
    MARKERS,
    MarkerScanner,
    MarkerSet,
    cuda_line,
    decodes_to_magic,
    embedded_binary,
    first_match,
)
from tests.compliance.treeutil import CASES, fake_binary

# --------------------------------------------------------------------------- references


def _reference_view(data: bytes, markers: MarkerSet, c_source: bool) -> dict[str, int]:
    """Every family decided on its own (``bytes.find`` per literal, as before the literal search;
    CUDA by ``cuda_line`` over all the data, with no literal search before it)."""
    found = {}
    for marker in markers.families:
        if marker.name == "cuda":
            anchors = (b"global",) if markers is DATA_MARKER_SET else (b"global", b"##", b"%:%:")
            if not any(a in data for a in anchors + recognisers._CONTINUATION_LITERALS):
                continue  # data files: a pasted spelling is out of reach (docs/security.md)
            line = cuda_line(data, c_source)
            if line is not None:
                found[marker.name] = line
            continue
        offset = first_match(data, marker)
        if offset is not None:
            found[marker.name] = data.count(b"\n", 0, offset) + 1
    return found


def reference_markers(data: bytes, markers: MarkerSet, c_source: bool = False) -> dict[str, int]:
    """``_reference_view`` of the text, then of the text with its string escapes undone (read as a
    loader hands it on, not as C) for the families not found."""
    found = _reference_view(data, markers, c_source)
    if recognisers.ESCAPE_HINT.search(data):
        for name, line in _reference_view(recognisers.unescape(data), markers, False).items():
            found.setdefault(name, line)
    return found


_B64_RUN = re.compile(rb"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{64,}")


def reference_base64(data: bytes) -> bool:
    """Every maximal run of 64 or more base64 characters found by a regex over all the data, as
    before the every-fourth-byte prefilter; a run hides a binary when it decodes to a magic at its
    start (from any of its first four characters)."""
    return any(decodes_to_magic(data, run.start()) for run in _B64_RUN.finditer(data))


# --------------------------------------------------------------------------- generated data

LITERALS = sorted({lit for m in MARKERS + recognisers.DATA_MARKERS for lit in m.literals + m.anchors})
SNIPPETS = [
    b"__global__ void k()", b"__glo\\\nbal__", b"__glo\\\r\nbal__", b"__attribute__((global))",
    b"__attribute__ ((__global__ ))", b"asm volatile(", b"__asm__", b"\n.entry k", b" .entry $k",
    b"@triton.jit", b"from triton import jit", b"import triton as t\n@t . jit", b"from numba import cuda",
    b"@cuda.jit", b"cupy.RawKernel(", b"ElementwiseKernel", b"torch.cuda.jiterator", b"load_inline(",
    b"cpp_extension.load(", b"import torch.utils.cpp_extension as ce\nce.load(",
    b"from torch.utils.cpp_extension import (x,\n load)", b"TORCH_LIBRARY(", b"#include <torch/extension.h>",
    b"global_batch_size", b"\\\n", b"\n", b" ", b"_",
    b"__location__(global)", b"__annotate__( global )", b"[[gnu::global]]", b"[[using gnu: tile_global]]",
    b"__tile_global__", b"\n#define KQ ", b"\n%:define G(a, b) a##b\n", b"G(__glo, bal__)", b"KQ void k(",
    b"__glo\\ \t\nbal__", b"/* ", b" */", b"//", b"\"", b"'", b"##", b"%:%:",
    b"from cuda.bindings import nvrtc", b"nvrtc.nvrtcCreateProgram(", b"ctypes.CDLL('libnvrtc.so')",
    b"import tvm\nm = tvm.build(s)", b"mx.rtc.CudaModule(", b"@triton.autotune(", b"cupy.RawModule(",
    b"\\u005f", b"\\x2e", b"\\137", b"jit", b"vrtc", b"Kernel",
]
pieces = st.one_of(st.binary(max_size=40), st.sampled_from(LITERALS), st.sampled_from(SNIPPETS))
texts = st.lists(pieces, max_size=30).map(b"".join)


def _blob(payload: bytes, shift: int) -> bytes:
    """Base64 text of ``payload`` behind ``shift`` bytes, so the magic lands at every alignment."""
    return base64.b64encode(bytes(shift) + payload)


ELF = fake_binary("elf-so")[:60]
b64_pieces = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"f0VMRg", b"UEsDBA", b"H4sI", b"iVBORw0KGgo"]),
    st.sampled_from([b"A" * 70, b"/" * 64, b"+" * 63, b" ", b"\n", b"="]),
    st.builds(lambda blob, length: blob[:length],  # runs just short of, at and past 64 characters
              st.builds(_blob, st.sampled_from([ELF, b"PK\x03\x04" + bytes(60), b"\x1f\x8b\x08" + bytes(60)]),
                        st.integers(0, 5)),
              st.integers(60, 68)),
)
b64_texts = st.lists(b64_pieces, max_size=12).map(b"".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=texts, markers=st.sampled_from([CODE_MARKERS, DATA_MARKER_SET]),
       slice_bytes=st.sampled_from([5, 64, 1 << 20]), c_source=st.booleans())
def test_literal_search_finds_what_per_literal_find_finds(data: bytes, markers: MarkerSet, slice_bytes: int,
                                                          c_source: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recognisers, "SEARCH_SLICE", slice_bytes)  # literals across the slice edges too
    scanner = MarkerScanner(markers, c_source)
    scanner.scan(data)
    assert scanner.found == reference_markers(data, markers, c_source)


@settings(max_examples=200, deadline=None)
@given(b64_texts)
def test_base64_runs_find_what_needle_search_finds(data: bytes) -> None:
    assert (embedded_binary(data, at_start=False) == "embedded-base64") == reference_base64(data)


def test_base64_prefilter_sees_a_blob_in_a_run_of_any_length() -> None:
    blob = base64.b64encode(fake_binary("elf-so"))
    for before in (b"", b"x", b"xyz", b"A" * 100 + b" ", b"log line: "):
        assert embedded_binary(before + blob + b"\n", at_start=False) == "embedded-base64"
    assert embedded_binary(b"hash: " + b"9f86d081" * 8 + b"\n", at_start=False) is None
    for length, hidden in ((63, False), (64, True)):  # the shortest run that can hide a blob
        data = b" " + blob[:length] + b" "
        assert reference_base64(data) is hidden
        assert (embedded_binary(data, at_start=False) == "embedded-base64") is hidden


@pytest.mark.parametrize("magic", [b"\x7fELF", b"PK\x03\x04", b"\x1f\x8b\x08"])
@pytest.mark.parametrize("shift", [1, 2, 3, 4, 37])
def test_a_magic_inside_an_image_is_not_a_binary(magic: bytes, shift: int) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))[:shift] + magic + bytes(range(256))
    assert embedded_binary(b'"image/png": "' + base64.b64encode(png) + b'"', at_start=False) is None
    assert embedded_binary(b'"data": "' + base64.b64encode(magic + png) + b'"', at_start=False) == "embedded-base64"


def test_crlf_line_continuation_splitting_global_is_cuda() -> None:
    scanner = MarkerScanner()
    scanner.scan(b"int x;\r\n__glo\\\r\nbal__ void k(float* x) {}\r\n")
    assert scanner.found == {"cuda": 2}


def test_attribute_global_far_from_its_attribute_keyword_is_cuda() -> None:
    scanner = MarkerScanner()
    scanner.scan(b"__attribute__" + b" " * 300 + b"((global)) void k(float* x) {}\n")
    assert scanner.found == {"cuda": 1}


def test_one_family_repeated_everywhere_is_decided_once_per_window() -> None:
    data = b"numba " * 200_000  # 1.2 MB of a literal whose expression never matches
    scanner = MarkerScanner()
    scanner.scan(data)
    assert scanner.found == {}


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("marker", [b"__global__", b"__attribute__((global))", b"\n.entry k", b"@triton.jit"])
@pytest.mark.parametrize("shift", [-20, -5, -1, 0, 1, 7])
def test_marker_across_a_chunk_edge_is_found_with_its_line(tmp_path: Path, marker: bytes, shift: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory, "CHUNK_BYTES", 8192)
    before = 8192 + shift - len(marker) // 2  # the marker's middle lands on the first chunk's edge
    prefix = (b"x" * 99 + b"\n") * (before // 100)
    content = prefix + b"y" * (before - len(prefix)) + marker + b"\n" + b"z" * 20_000 + b"\n"
    (tmp_path / "k.py").write_bytes(content)
    walk = walk_tree(tmp_path, workers=1)
    assert {e.marker: e.line for e in walk.native["k.py"]} == reference_markers(content, CODE_MARKERS) != {}


def test_base64_blob_across_a_chunk_edge_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory, "CHUNK_BYTES", 8192)
    blob = base64.b64encode(fake_binary("elf-so"))
    content = b"#" * (8192 - 10) + blob + b"\n"  # the first chunk holds 10 characters of it
    (tmp_path / "lib.py").write_bytes(content)
    walk = walk_tree(tmp_path, workers=1)
    assert walk.binaries == [("lib.py", "embedded-base64", len(content))]


# --------------------------------------------------------------------------- workers


def _normalised(walk: inventory.Walk) -> dict[str, object]:
    """The walk's content; lists whose order the inventory sorts anyway are compared sorted."""
    out: dict[str, object] = {}
    for name, value in vars(walk).items():
        if isinstance(value, list) and name != "setups":
            value = sorted(value)
        elif name == "build_products":
            value = {directory: sorted(products) for directory, products in value.items()}
        out[name] = value
    return out


def test_workers_find_exactly_what_one_process_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(CASES, tree)  # every hostile and acceptance case: kernels, binaries, setup.py, manifests
    os.symlink("negative", tree / "link-to-dir")
    os.symlink("base/Acme/benchmarks/dlrm/implementations/torch/kernels/emb.cu", tree / "link-to-file.cu")
    monkeypatch.setattr(inventory, "PARALLEL_MIN_FILES", 0)
    monkeypatch.setattr(inventory, "BATCH_FILES", 3)
    one = walk_tree(tree, workers=1)
    spread = walk_tree(tree, workers=2)
    assert one.native and one.binaries and one.setups
    assert _normalised(spread) == _normalised(one)


def _square_dying_in_worker(item: tuple[int, int]) -> int:
    parent, value = item
    if value == 3 and os.getpid() != parent:
        os._exit(1)  # a worker killed mid-batch (out of memory, a signal)
    return value * value


def test_a_dead_worker_s_items_are_redone_in_this_process() -> None:
    work: OrderedWork[tuple[int, int], int] = OrderedWork(_square_dying_in_worker, 2)
    assert work.start()
    for value in range(8):
        work.submit((os.getpid(), value))
    assert list(work.results()) == [v * v for v in range(8)]


def test_one_worker_runs_everything_here() -> None:
    work: OrderedWork[tuple[int, int], int] = OrderedWork(_square_dying_in_worker, 1)
    assert not work.start() and not work.parallel
    work.submit((os.getpid(), 3))
    work.add(100)
    assert list(work.results()) == [9, 100]
