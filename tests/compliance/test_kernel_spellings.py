"""Every kernel-entry spelling the checker knows is one to nvcc, and the checker finds each (issue 50
class 4): one translation unit holds a kernel per spelling (``preprocessor.SPELLINGS``, plus the
forms only the preprocessor makes: a splice with trailing blanks, a ``#define``, a pasted macro, a
``%:define`` digraph, a macro from an included header); ``nvcc --ptx`` must give an ``.entry`` for
each, and ``kernel_definitions`` must name exactly those kernels. The same text with the spellings
in comments and string literals must give neither."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compliance.kernel_symbols import kernel_definitions
from compliance.preprocessor import SPELLINGS, kernel_line
from compliance.recognisers import scan_markers

BODY = '(float* x) { x[0] = 1.0f; }\n'
PREPROCESSED = [
    ("__glo\\ \t\nbal__", ""),
    ("KQ", "#define KQ __global__\n"),
    ("CAT(__glo, bal__)", "#define CAT(a, b) a##b\n"),
    ("KQ2", "%:define KQ2 __location__(global)\n"),
    ("FROM_HEADER", '#include "spell.h"\n'),
]
HEADER = "#define FROM_HEADER __attribute__((noinline, global))\n"


def _unit() -> tuple[str, list[str]]:
    """(source, kernel names): one ``extern "C"`` kernel per spelling."""
    lines, names = [], []
    for index, (spelling, before) in enumerate([(s, "") for s in SPELLINGS] + PREPROCESSED):
        name = f"k{index}"
        lines.append(f'{before}extern "C" {spelling} void {name}{BODY}')
        names.append(name)
    return "".join(lines), names


def _resolve(_including: str, name: bytes) -> tuple[str, bytes] | None:
    return ("spell.h", HEADER.encode()) if name == b"spell.h" else None


def test_the_checker_finds_every_spelling() -> None:
    source, names = _unit()
    assert [f for _, f in kernel_definitions("spell.cu", source.encode(), _resolve)] == names
    for spelling, before in [(s, "") for s in SPELLINGS] + PREPROCESSED[:-1]:
        text = f"{before}{spelling} void k{BODY}".encode()
        assert kernel_line(text) is not None, spelling
        assert scan_markers(text, c_source=True) and scan_markers(text, c_source=False), spelling


def test_spellings_in_comments_and_strings_are_no_kernels() -> None:
    for spelling in SPELLINGS:
        text = f'// {spelling} void a{BODY}/* {spelling} void b{BODY}*/ const char* s = "{spelling} void c()";\n'
        assert kernel_definitions("x.cu", text.encode()) == [], spelling
        assert kernel_line(text.encode()) is None, spelling


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_makes_an_entry_of_every_spelling(tmp_path: Path) -> None:
    source, names = _unit()
    (tmp_path / "spell.h").write_text(HEADER)
    (tmp_path / "spell.cu").write_text(source)
    proc = subprocess.run(["nvcc", "--ptx", "-o", str(tmp_path / "spell.ptx"), str(tmp_path / "spell.cu")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    entries = set(re.findall(r"\.entry\s+(\w+)", (tmp_path / "spell.ptx").read_text()))
    assert entries == set(names), proc.stderr
