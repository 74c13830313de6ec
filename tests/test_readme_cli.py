"""The README's "Command line" table is true to ``kfp-spot <command> --help``.

Every command a row names exists, and every option the row mentions is one its command takes.
Read from the table itself, so a row that is added or rewritten is checked the same way.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kfp_spot.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
_WORD = re.compile(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*")
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _table_rows() -> list[list[str]]:
    """The rows of the table under "## Command line": cells, with ``\\|`` unescaped."""
    text = README.read_text()
    section = text.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[0] != "command":
            rows.append(cells)
    return rows


def _words(code: str) -> tuple[list[list[str]], str]:
    """The leading command words of ``code`` (each a list of alternatives) and the rest."""
    tokens = code.split()
    words = []
    while tokens and _WORD.fullmatch(tokens[0]):
        words.append(tokens.pop(0).split("|"))
    return words, " ".join(tokens)


def _commands(words: list[list[str]]) -> list[tuple[str, ...]]:
    return list(itertools.product(*words))


def _mentions() -> list[tuple[str, list[tuple[str, ...]], set[str]]]:
    """Per row and code span: the commands it names and the options it mentions with them."""
    found = []
    for cells in _table_rows():
        spans = [s for cell in cells for s in re.findall(r"`([^`]+)`", cell)]
        row_commands: list[tuple[str, ...]] = []
        groups: set[tuple[str, ...]] = set()
        for span in spans:
            if span.startswith("kfp-spot "):
                words, rest = _words(span.removeprefix("kfp-spot "))
                commands = _commands(words)
                row_commands += commands
                groups |= {c[:-1] for c in commands if len(c) > 1}
            else:
                words, rest = _words(span)
                # `preempt --replica ...` in the `emulator start|preempt|logs` row: a subcommand
                # of the row's group; a bare `--api-endpoint`: an option of the row's commands.
                commands = [g + c for g in groups for c in _commands(words)] if words else []
                if not commands:
                    rest = span
            options = set(_OPTION.findall(rest))
            if span.startswith("kfp-spot ") or options:  # not `run.json`, `report.png`, ...
                found.append((span, commands or row_commands, options))
    return found


def _help(command: tuple[str, ...]) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, f"kfp-spot {' '.join(command)} --help: {result.output}"
    return result.output


MENTIONS = _mentions()


def test_the_table_is_found_and_names_commands():
    assert len(MENTIONS) >= 8
    assert all(commands for _, commands, _ in MENTIONS)


@pytest.mark.parametrize(("span", "commands", "options"), MENTIONS, ids=[m[0] for m in MENTIONS])
def test_every_command_and_option_in_the_readme_table_exists(span, commands, options):
    helps = {command: _help(command) for command in commands}
    for option in sorted(options):
        takes = [c for c, text in helps.items() if option in set(_OPTION.findall(text))]
        assert takes, f"README `{span}`: {option} is not an option of {sorted(helps)}"


def _all_commands() -> list[tuple[str, ...]]:
    """Every command ``kfp-spot`` has: the top-level ones and each group's subcommands."""
    found: list[tuple[str, ...]] = []
    context = click.Context(main)
    for name in main.list_commands(context):  # the lazy group loads a command when asked
        command = main.get_command(context, name)
        if isinstance(command, click.Group):
            found += [(name, sub) for sub in command.list_commands(click.Context(command))]
        else:
            found.append((name,))
    assert len(found) >= 12, found
    return found


def test_every_command_has_a_row_in_the_readme_table():
    named = {command for _, commands, _ in MENTIONS for command in commands}
    named |= {
        command
        for cells in _table_rows()
        for span in re.findall(r"`kfp-spot ([^`]+)`", cells[0])
        for command in _commands(_words(span)[0])
    }
    missing = [" ".join(c) for c in _all_commands() if c not in named]
    assert not missing, f"README's Command line table names no row for: kfp-spot {missing}"
