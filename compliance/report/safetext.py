"""Text from the checked tree made safe to print: file names and manifest strings are the
submitter's, so they may hold lone surrogates (undecodable file names, ``"\\ud800"`` in
YAML), control characters, or terminal escape sequences.

``one_line`` escapes every control character (a file name holding ``\\n  PASS`` must not
forge a report line) and every invisible character that changes how a line reads: the
bidirectional controls (U+202A-202E, U+2066-2069, U+200E/F, U+061C: a name holding U+202E
shows its tail reversed), the line and paragraph separators U+2028/U+2029 (an editor or a
browser breaks the line there), zero-width characters and U+FEFF; ``xml_safe`` escapes what
XML 1.0 cannot hold and the same invisible characters; ``encodable`` makes any text writable to
a stream of a given encoding (lone surrogates become ``\\udcXX``).
"""

from __future__ import annotations

import re

_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
"""Bidirectional controls, line/paragraph separators, zero-width and word-joining characters."""
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_NOT_XML = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff{_INVISIBLE}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def encodable(text: str, encoding: str = "utf-8") -> str:
    """``text`` with every character ``encoding`` cannot hold (lone surrogates above all)
    replaced by a backslash escape."""
    return text.encode(encoding, "backslashreplace").decode(encoding)


def one_line(text: str) -> str:
    """``text`` with control characters (newlines included) and lone surrogates escaped."""
    return encodable(_CONTROL.sub(_escape, text))


def xml_safe(text: str) -> str:
    """``text`` with the characters XML 1.0 forbids escaped (markup is ET's job)."""
    return encodable(_NOT_XML.sub(_escape, text))
