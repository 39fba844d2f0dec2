"""Input errors: problems with what the user gave the tool (exit code 2).

Findings describe the checked tree; an ``InputError`` means the tool could not
do its job at all (a bad rule file, a missing path, an unknown rule set).
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """A usage or input problem, reported with the file (and line) it concerns."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None,
                 column: int | None = None) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.column = column
        super().__init__(self.__str__())

    def location(self) -> str:
        """``file:line:column`` as far as known, or an empty string."""
        if self.path is None:
            return ""
        parts = [self.path]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def __str__(self) -> str:
        where = self.location()
        return f"{where}: {self.message}" if where else self.message


class InputErrors(InputError):
    """Several input errors found at once (all schema errors of a file, say)."""

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
