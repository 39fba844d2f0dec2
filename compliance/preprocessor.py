"""C, C++ and CUDA text as the compiler reads it, for finding kernel entries.

A kernel entry is whatever the CUDA front end turns into a ``.entry``: the spellings come from
CUDA's own ``include/crt/host_defines.h`` (CUDA 13.0, the GCC branch), where ``__global__`` is
``__location__(global)``, ``__location__(a)`` is ``__annotate__(a)`` and ``__annotate__(a)`` is
``__attribute__((a))``; ``__tile_global__`` is ``__location__(tile_global)``. The front end also
takes the C++11 form ``[[gnu::global]]`` (``[[__gnu__::global]]``, ``[[using gnu: global]]``)
and ``global`` anywhere in an attribute list (``__attribute__((noinline, global))``).
``tests/compliance/test_kernel_spellings.py`` compiles every spelling in ``SPELLINGS`` with
``nvcc --ptx`` and checks that it yields an ``.entry``.

The text is read in the preprocessor's order (C++ [lex.phases]): line splices joined (a
backslash, optional trailing blanks, a newline: GCC and nvcc accept the blanks with a warning),
then comments and string and character literals set apart (a ``__global__`` in a comment or in a
string is no kernel to the compiler), then ``#define``/``#undef`` (also spelled ``%:define``, the
digraph) applied and every macro expanded, object-like and function-like, with ``#`` and ``##``,
so ``#define KQ __global__`` then ``KQ void k()`` and ``G(__glo, bal__)`` with ``#define G(a, b)
a##b`` are kernels. ``#include`` is followed through a resolver the caller gives (files of the
tree only). Conditional directives are not evaluated: code under ``#if 0`` counts (a kernel there
is reported, which errs on the safe side). Expansion stops after ``EXPANSION_BUDGET`` token steps
(a macro bomb); ``Expansion.exhausted`` says so and callers treat the text as a kernel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

SPLICE = re.compile(rb"\\[ \t\f\v]*\r?\n")
"""A line splice: a backslash, blanks the compiler tolerates, a newline."""
_LEXEMES = re.compile(
    rb"^[ \t]*(?:#|%:)[ \t]*(?:include|include_next|import)\b[ \t]*(?:\"[^\"\n]*\"|<[^>\n]*>)"  # kept whole
    rb"|/\*.*?(?:\*/|\Z)"  # block comment (an unterminated one runs to the end, as for the compiler)
    rb"|//[^\n]*"  # line comment
    rb"|(?<![\w])(?:u8|[uUL])?R\"([^ ()\\\t\v\f\n]{0,16})\(.*?\)\1\""  # raw string literal
    rb"|(?:u8|[uUL])?\"(?:\\.|[^\"\\\n])*\""  # string literal
    rb"|(?<![\w'])(?:u8|[uUL])?'(?:\\.|[^'\\\n])*'",  # character literal (not a digit separator: 1'000)
    re.S | re.M)
_ATTRIBUTE_NAME = rb"(?:__)?(?:tile_)?global(?:__)?"
_KEYWORD = re.compile(rb"__(?:tile_)?global__")
_LOCATION = re.compile(rb"__(?:location|annotate)__\s*\(\s*" + _ATTRIBUTE_NAME + rb"\s*\)")
_DOUBLE_BRACKET = re.compile(rb"\[\s*\[")
_CXX11 = re.compile(rb"\[\s*\[[^\[\]]{0,256}?(?<![\w$])" + _ATTRIBUTE_NAME + rb"(?![\w$])[^\[\]]{0,256}\]\s*\]")
_ATTRIBUTE_OPENERS = re.compile(rb"__attribute__\s*\(")
_ATTRIBUTE_NAME_TOKEN = re.compile(rb"(?<![\w$])" + _ATTRIBUTE_NAME + rb"(?![\w$])")
_ATTRIBUTE_SPAN = 4096
"""Bytes of one attribute list examined (balanced brackets, at most this far)."""
SPELLINGS = (
    "__global__", "__location__(global)", "__annotate__(global)", "__attribute__((global))",
    "__attribute__((noinline, global))", "[[gnu::global]]", "[[__gnu__::global]]",
    "[[using gnu: global]]", "__tile_global__", "__location__(tile_global)",
    "__attribute__((tile_global))", "[[gnu::tile_global]]",
)
"""Every kernel-entry spelling recognised, each compiled by the nvcc test (prefixing a definition)."""
EXPANSION_BUDGET = 1_000_000
"""Tokens read and produced by macro expansion per text, once a macro is defined (a bomb of nested
macros stops here; text before the first ``#define`` is not tokenised at all)."""
_TOKEN = re.compile(rb"[A-Za-z_$\x80-\xff][\w$\x80-\xff]*|\.?\d(?:[\w.]|[eEpP][+-])*|%:%:|##|%:|\.\.\.|::|\n|\S")
_DIRECTIVE = re.compile(rb"[ \t]*(?:#|%:)[ \t]*(\w*)(.*)")
_DEFINE = re.compile(rb"[ \t]*([A-Za-z_$][\w$]*)(\()?")
_PASTE = (b"##", b"%:%:")
DEFINES = re.compile(rb"^[ \t]*(?:#|%:)[ \t]*define\b", re.M)
"""A ``#define`` line: only a text holding one can make a kernel spelling by expansion."""
_INCLUDE = re.compile(rb"[ \t]*[<\"]([^>\"\n]+)[>\"]")
_INCLUDE_LINE = re.compile(rb"^[ \t]*(?:#|%:)[ \t]*(?:include|include_next|import)[ \t]*"
                           rb"(?:\"([^\"\n]+)\"|<([^>\n]+)>)", re.M)


def join_splices(data: bytes) -> bytes:
    """``data`` with every line splice joined; each joined line keeps its first line's number (the
    newlines removed follow it), so line numbers of what follows are unchanged."""
    if b"\\" not in data or not SPLICE.search(data):
        return data
    # One pass over the splices (a pattern spanning each spliced line backtracked quadratically on
    # long lines holding backslashes: minutes on a round's JSON logs). ``owed`` newlines go just
    # before the newline (or the end) that closes the joined line.
    parts: list[bytes] = []
    pos = owed = 0
    for splice in SPLICE.finditer(data):
        if owed and (close := data.find(b"\n", pos, splice.start())) >= 0:
            parts += [data[pos:close], b"\n" * owed]
            pos, owed = close, 0
        parts.append(data[pos:splice.start()])
        pos, owed = splice.end(), owed + 1
    close = data.find(b"\n", pos)
    close = len(data) if close < 0 else close
    parts += [data[pos:close], b"\n" * owed, data[close:]]
    return b"".join(parts)


def includes(data: bytes) -> list[tuple[bytes, bool]]:
    """The header names ``data`` includes, in order, as the compiler reads them (an ``#include`` in a
    comment or spliced over lines counts as the compiler counts it): (name, quoted), where quoted is
    ``"name"`` (searched beside the including file first) and not ``<name>`` (searched in the include
    directories only). A name made by a macro is not followed."""
    return [(m.group(1) or m.group(2), m.group(1) is not None) for m in _INCLUDE_LINE.finditer(logical_text(data))]


def _set_apart(match: re.Match[bytes]) -> bytes:
    text = match.group()
    if text[-1:] in b'">' and text.lstrip()[:1] in (b"#", b"%"):
        return text  # an #include's header name
    newlines = b"\n" * text.count(b"\n")
    if text.startswith(b"/"):
        return b" " + newlines
    return (b"''" if text.endswith(b"'") else b'""') + newlines


def _comment_apart(match: re.Match[bytes]) -> bytes:
    text = match.group()
    return _set_apart(match) if text.startswith(b"/") else text


def logical_text(data: bytes, strings: bool = False) -> bytes:
    """``data`` after translation phases 2 and 3: splices joined, each comment one blank, each string
    or character literal empty (``""``, ``''``; kept when ``strings``: text that a loader compiles
    holds its kernels in literals); line numbers unchanged."""
    return _LEXEMES.sub(_comment_apart if strings else _set_apart, join_splices(data))


def _attribute_holds_global(text: bytes, start: int) -> bool:
    """The parenthesised list of an ``__attribute__`` opening at ``start`` names ``global``."""
    closer = {ord("("): ord(")"), ord("["): ord("]")}
    depth, index, stop = 0, start, min(len(text), start + _ATTRIBUTE_SPAN)
    while index < stop:
        byte = text[index]
        if byte in closer:
            depth += 1
        elif byte in (ord(")"), ord("]")):
            depth -= 1
            if depth == 0:
                break
        elif byte in b";{}":
            break
        index += 1
    return _ATTRIBUTE_NAME_TOKEN.search(text, start, index) is not None


def qualifier_offset(text: bytes) -> int | None:
    """Offset of the first kernel-entry spelling in ``text`` (a logical or expanded text)."""
    spans = qualifier_spans(text)
    return spans[0][0] if spans else None


def qualifier_spans(text: bytes) -> list[tuple[int, int]]:
    """(start, end) of every kernel-entry spelling in ``text``, in order. Each form's expression runs
    only where its literal occurs (these texts include megabytes of logs that say ``global``); every
    spelling holds ``__`` or a bracket."""
    has_brackets = b"[" in text
    if not has_brackets and b"__" not in text:
        return []
    spans = [m.span() for m in _KEYWORD.finditer(text)] if b"global__" in text else []
    if b"__location__" in text or b"__annotate__" in text:
        spans += [m.span() for m in _LOCATION.finditer(text)]
    if has_brackets and _DOUBLE_BRACKET.search(text):
        spans += [m.span() for m in _CXX11.finditer(text)]
    if b"__attribute__" in text:
        for opener in _ATTRIBUTE_OPENERS.finditer(text):
            inner = opener.start() + len(b"__attribute__")
            if _attribute_holds_global(text, inner):
                spans.append((opener.start(), closing(text, inner)))
    return sorted(spans)


def closing(text: bytes, start: int) -> int:
    """Offset past the bracket closing the one at ``start`` (or past the attribute span)."""
    depth = 0
    for index in range(start, min(len(text), start + _ATTRIBUTE_SPAN)):
        if text[index] in b"([":
            depth += 1
        elif text[index] in b")]":
            depth -= 1
            if depth == 0:
                return index + 1
    return min(len(text), start + _ATTRIBUTE_SPAN)


# --------------------------------------------------------------------------- macro expansion

@dataclass(frozen=True)
class Macro:
    """One ``#define``."""

    params: tuple[bytes, ...] | None
    """Parameter names (``__VA_ARGS__`` for ``...``); None for an object-like macro."""
    body: tuple[bytes, ...]
    """Replacement tokens."""


class BudgetExhausted(Exception):
    """Expansion ran past ``EXPANSION_BUDGET`` steps."""


@dataclass
class Expansion:
    """The expanded text of a source and the files it was read from, in reading order."""

    parts: list[tuple[str, bytes]] = field(default_factory=list)
    """(file, expanded text of that file's non-directive lines)."""
    exhausted: bool = False
    """Expansion stopped at the budget: what follows was not expanded."""


Resolver = Callable[[str, bytes], "tuple[str, bytes] | None"]
"""(including file, included name) -> (file, content) of a file of the tree, or None."""


class _Expander:
    def __init__(self, resolve: Resolver | None, budget: int, strings: bool) -> None:
        self.strings = strings
        self.macros: dict[bytes, Macro] = {}
        self.resolve = resolve
        self.budget = budget
        self.seen: set[str] = set()
        self.result = Expansion()

    def spend(self, steps: int = 1) -> None:
        self.budget -= steps
        if self.budget < 0:
            raise BudgetExhausted

    def read(self, name: str, data: bytes, depth: int = 0) -> None:
        """Read one file (and what it includes) in order, appending its expanded text."""
        self.seen.add(name)
        pending: list[bytes] = []
        for line in logical_text(data, self.strings).split(b"\n"):
            directive = _DIRECTIVE.match(line)
            if directive is None:
                pending.append(line)
                continue
            self.flush(name, pending)
            pending = [b""]  # the directive's line, kept for line counting
            self.directive(name, directive.group(1), directive.group(2), depth)
        self.flush(name, pending)

    def flush(self, name: str, lines: list[bytes]) -> None:
        """Append ``lines`` (code between directives) expanded; as they are while no macro is defined."""
        if lines:
            text = b"\n".join(lines)
            if self.macros:
                tokens = _TOKEN.findall(text)
                self.spend(len(tokens))
                text = b" ".join(self.expand(tokens))
            self.result.parts.append((name, text))
        lines.clear()

    def directive(self, name: str, keyword: bytes, rest: bytes, depth: int) -> None:
        if keyword == b"define":
            self.define(rest)
        elif keyword == b"undef":
            self.macros.pop(rest.strip(), None)
        elif keyword in (b"include", b"include_next", b"import") and self.resolve is not None and depth < 32:
            target = _INCLUDE.match(rest)
            found = self.resolve(name, target.group(1)) if target else None
            if found is not None and found[0] not in self.seen:
                self.read(found[0], found[1], depth + 1)

    def define(self, rest: bytes) -> None:
        head = _DEFINE.match(rest)
        if head is None:
            return
        tokens = _TOKEN.findall(rest[head.end():])
        params: tuple[bytes, ...] | None = None
        if head.group(2):  # a parenthesis right after the name: function-like
            close = tokens.index(b")") if b")" in tokens else len(tokens)
            params = tuple(b"__VA_ARGS__" if t == b"..." else t for t in tokens[:close] if t != b",")
            tokens = tokens[close + 1:]
        self.macros[head.group(1)] = Macro(params, tuple(tokens))

    def expand(self, tokens: list[bytes], hide: frozenset[bytes] = frozenset()) -> list[bytes]:
        """``tokens`` with every macro expanded (hide sets as in the standard's rescanning rule)."""
        stack = [(token, hide) for token in reversed(tokens)]
        out: list[bytes] = []
        while stack:
            token, hidden = stack.pop()
            macro = self.macros.get(token)
            if macro is None or token in hidden:
                out.append(token)
                continue
            if macro.params is None:
                self.spend(len(macro.body) + 1)
                stack.extend((t, hidden | {token}) for t in reversed(macro.body))
                continue
            args = _take_arguments(stack)
            if args is None:
                out.append(token)
                continue
            body = self.substitute(macro, args, hidden)
            self.spend(len(body) + 1)
            stack.extend((t, hidden | {token}) for t in reversed(body))
        return out

    def substitute(self, macro: Macro, args: list[list[bytes]], hide: frozenset[bytes]) -> list[bytes]:
        """The body of ``macro`` with its parameters replaced (``hide``: the names hidden where it
        was invoked; arguments are expanded in isolation, except next to ``#`` and ``##``)."""
        params = macro.params or ()
        if params and params[-1] == b"__VA_ARGS__" and len(args) > len(params):
            args = args[:len(params) - 1] + [[t for arg in args[len(params) - 1:] for t in (*arg, b",")][:-1]]
        bound = dict(zip(params, args, strict=False))  # missing arguments stay unbound
        body, out, skip = macro.body, [], False
        for index, token in enumerate(body):
            if skip:
                skip = False
            elif token in (b"#", b"%:") and index + 1 < len(body) and body[index + 1] in bound:
                out.append(b'""')  # stringified: a string is no kernel spelling
                skip = True
            elif token in bound:
                pasted = body[index - 1] in _PASTE if index else False
                pasted = pasted or (index + 1 < len(body) and body[index + 1] in _PASTE)
                out.extend(bound[token] if pasted else self.expand(bound[token], hide))
            else:
                out.append(token)
        return _paste(out)


def _take_arguments(stack: list[tuple[bytes, frozenset[bytes]]]) -> list[list[bytes]] | None:
    """Pop ``( a, b )`` off ``stack`` (next token last) and return the arguments, or None (and
    ``stack`` untouched) when no parenthesis follows or it is never closed."""
    index = len(stack) - 1
    while index >= 0 and stack[index][0] == b"\n":
        index -= 1
    if index < 0 or stack[index][0] != b"(":
        return None
    depth = 0
    args: list[list[bytes]] = []
    current: list[bytes] = []
    for position in range(index, -1, -1):
        token = stack[position][0]
        if token == b"(":
            depth += 1
            if depth == 1:
                continue
        elif token == b")":
            depth -= 1
            if depth == 0:
                args.append(current)
                del stack[position:]
                return args
        elif token == b"," and depth == 1:
            args.append(current)
            current = []
            continue
        if token != b"\n":
            current.append(token)
    return None


def _paste(tokens: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    glue = False
    for token in tokens:
        if token in _PASTE:
            glue = True
            continue
        if glue and out:
            out[-1] += token
        else:
            out.append(token)
        glue = False
    return out


def expand(name: str, data: bytes, resolve: Resolver | None = None, budget: int = EXPANSION_BUDGET,
           strings: bool = False) -> Expansion:
    """The text of ``data`` (the file ``name``) and of what it includes, every macro expanded
    (``strings``: string literals kept, for text a loader compiles)."""
    expander = _Expander(resolve, budget, strings)
    try:
        expander.read(name, data)
    except BudgetExhausted:
        expander.result.exhausted = True
    return expander.result


def kernel_line(data: bytes) -> int | None:
    """Line of the first kernel entry in a C, C++ or CUDA source as the compiler reads it, or None.

    The logical text is searched first (a spelling, or a ``#define`` of one, is evidence); macros
    are expanded only where they can make a spelling: the text holds ``global`` or pastes tokens.
    A spelling in the raw text is first tried in the logical text of the lines up to it (a kernel
    near the top costs only those lines); one found there is in code, since no literal or comment
    that could hold it ends past its line, unless a raw string opens before it (then the whole text
    is read). A spelling in a macro's argument counts even where the macro stringifies it (``#x``):
    the safe side; ``kernel_symbols`` expands it exactly."""
    joined = join_splices(data)
    raw = qualifier_offset(joined)
    if raw is not None and b'R"' not in joined[:raw]:  # a raw string can span lines: read it whole
        end = joined.find(b"\n", raw)
        head = logical_text(joined[:len(joined) if end < 0 else end])
        offset = qualifier_offset(head)
        if offset is not None:
            return head.count(b"\n", 0, offset) + 1
    text = logical_text(joined)
    offset = qualifier_offset(text)
    if offset is not None:
        return text.count(b"\n", 0, offset) + 1
    if (b"global" in text or b"##" in text or b"%:%:" in text) and b"define" in text and DEFINES.search(text):
        expansion = expand("", data)
        if expansion.exhausted or any(qualifier_offset(part) is not None for _, part in expansion.parts):
            return _first_use_line(text)
    return None


def _first_use_line(text: bytes) -> int:
    """The line of the first non-directive code after a ``#define`` (the kernel's line is unknown
    once expanded; this is where code using the macros starts)."""
    lines = text.split(b"\n")
    seen_define = False
    for number, line in enumerate(lines, 1):
        directive = _DIRECTIVE.match(line)
        if directive is not None:
            seen_define = seen_define or directive.group(1) == b"define"
        elif seen_define and line.strip():
            return number
    return 1
