"""Names of the kernel functions a source defines (CUDA kernel entries, Triton ``@triton.jit``).

Shared by ``compliance manifest draft`` (which proposes entry symbols) and the declaration
check (a declared kernel's sources, and the headers they include, define exactly the kernels it
declares). C, C++ and CUDA are read as the compiler reads them (``compliance.preprocessor``:
splices joined, comments and literals set apart, macros expanded, every kernel-entry spelling
CUDA's front end accepts); a kernel whose entry comes from a macro the text cannot expand
within the budget is reported under the name ``<macro-expansion-budget>``.
"""

from __future__ import annotations

import re

from compliance import preprocessor

TRITON = re.compile(rb"@\s*(?:triton\s*\.\s*)?jit\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")
_PY_COMMENTS = re.compile(rb"#[^\n]*")
_BRACKETED = re.compile(rb"\b(?:__launch_bounds__|__cluster_dims__|__maxnreg__|__local_maxnreg__|__attribute__|"
                        rb"__declspec|alignas|__location__|__annotate__|__align__)\s*(?=\()|\[\s*(?=\[)")
_NAME_CALL = re.compile(rb"([A-Za-z_$][\w$]*)\s*(?:<[^;{}()]*>\s*)?\(")
_NAME_BEFORE = re.compile(rb"([A-Za-z_$][\w$]*)\s*$")
_NOT_NAMES = frozenset({b"if", b"while", b"for", b"switch", b"return", b"sizeof", b"decltype", b"operator",
                        b"typeof", b"__typeof__", b"static_assert", b"noexcept", b"throw"})
_REACH = 2048
"""Bytes either side of a kernel spelling searched for the declarator it qualifies."""
EXHAUSTED = "<macro-expansion-budget>"


def _without_attributes(text: bytes) -> bytes:
    """``text`` with every attribute-like bracketed group (``__launch_bounds__(..)``, ``[[..]]``) blanked."""
    out, position = [], 0
    for match in _BRACKETED.finditer(text):
        if match.start() < position:
            continue
        out.append(text[position:match.start()])
        position = preprocessor.closing(text, match.end())
        out.append(b" ")
    out.append(text[position:])
    return b"".join(out)


def _declarator(text: bytes, start: int, end: int) -> bytes | None:
    """The function name a kernel spelling at ``text[start:end]`` qualifies: ``__global__ void k(``,
    ``void __global__ k(``, ``void k [[gnu::global]] (`` or ``void k(int) __attribute__((global));``."""
    after = _without_attributes(text[end:end + _REACH])
    after = after[:min((i for i in map(after.find, (b";", b"{", b"}", b"=")) if i >= 0), default=len(after))]
    before = _without_attributes(text[max(0, start - _REACH):start]).rstrip()
    if after.lstrip().startswith(b"("):  # the name precedes the spelling
        return _name(_NAME_BEFORE.search(before))
    call = _NAME_CALL.search(after)
    if call is not None:
        return _name(call)
    if before.endswith(b")"):  # after the parameter list
        depth = 0
        for index in range(len(before) - 1, -1, -1):
            depth += {ord(")"): 1, ord("("): -1}.get(before[index], 0)
            if depth == 0:
                return _name(_NAME_BEFORE.search(before[:index]))
    return None


def _name(match: re.Match[bytes] | None) -> bytes | None:
    return match.group(1) if match is not None and match.group(1) not in _NOT_NAMES else None


def kernel_definitions(name: str, data: bytes, resolve: preprocessor.Resolver | None = None,
                       strings: bool = False) -> list[tuple[str, str]]:
    """(file, kernel function) for every kernel entry in the C/C++/CUDA source ``data`` (the file
    ``name``) and in the files it includes that ``resolve`` finds, in reading order (``strings``:
    kernels in string literals count too, for text a loader compiles, e.g. a Python file)."""
    expansion = preprocessor.expand(name, data, resolve, strings=strings)
    found = []
    for file, text in expansion.parts:
        for start, end in preprocessor.qualifier_spans(text):
            function = _declarator(text, start, end)
            if function is not None:
                found.append((file, function.decode("utf-8", "replace")))
    if expansion.exhausted:
        found.append((name, EXHAUSTED))
    return found


def kernel_functions(data: bytes, python: bool = False, strings: bool = False) -> list[str]:
    """Kernel function names defined in ``data``: Triton functions when ``python``, else CUDA kernels
    of a C/C++/CUDA source (``strings``: also those in string literals, for other text)."""
    if python:
        return [m.group(1).decode() for m in TRITON.finditer(_PY_COMMENTS.sub(b"", data))]
    return [function for _, function in kernel_definitions("", data, strings=strings)]
