"""Text from the checked tree made safe to print: file names and manifest strings are the
submitter's, so they may hold lone surrogates (undecodable file names, ``"\\ud800"`` in
YAML), control characters, or terminal escape sequences.

``one_line`` escapes every control character (a file name holding ``\\n  PASS`` must not
forge a report line); ``xml_safe`` escapes what XML 1.0 cannot hold; ``encodable`` makes
any text writable to a stream of a given encoding (lone surrogates become ``\\udcXX``).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


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
