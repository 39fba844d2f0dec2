"""Every command's --help lists its exit codes; one metavar per kind of value; one error style
(issue 51 item 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from compliance.cli.main import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


COMMANDS = [((), cli), *_commands(cli)]


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=[" ".join(w) or "compliance" for w, _ in COMMANDS])
def test_help_lists_the_exit_codes(words: tuple[str, ...], command: click.Command) -> None:
    result = CliRunner().invoke(cli, [*words, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Exit codes: 0 " in text
    for shared in ("2 usage or input error", "3 internal error", "141 standard output closed"):
        assert shared in text, f"{' '.join(words)}: {shared!r} missing"


def _parameters() -> Iterator[tuple[str, click.Parameter]]:
    for words, command in COMMANDS:
        for param in command.params:
            yield " ".join(words), param


def test_one_metavar_per_kind_of_value() -> None:
    context = click.Context(cli)
    for where, param in _parameters():
        metavar = param.make_metavar(context)
        assert "DIRECTORY" not in metavar and "INTEGER" not in metavar, f"{where} {param.name}: {metavar}"
        if param.name in ("rules", "name", "files"):
            assert metavar.startswith("NAME|FILE"), f"{where} {param.name}: {metavar}"
        if isinstance(param.type, click.Path) and not param.type.file_okay and isinstance(param, click.Option):
            assert metavar == "DIR", f"{where} {param.name}: {metavar}"


def test_manifest_draft_output_says_what_it_writes() -> None:
    result = CliRunner().invoke(cli, ["manifest", "draft", "--help"], terminal_width=200)
    assert "Write the draft kernel_manifest.yaml" in result.output


@pytest.mark.parametrize("args", [
    ["rules", "explain", "no-such-rule"],      # the tool's own input error
    ["check", "--format", "nope", "."],       # Click's usage error
    ["rules", "show", "training/v99"],
])
def test_one_error_style(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.stderr.lstrip().splitlines()[-1].startswith("Error: "), result.stderr
