"""``--help`` reads as a person would write it, at 80 columns: a flag shows no type, an argument its name in
capitals, and no description breaks a line before the line is full (a docstring's own line breaks are not shown)."""

from __future__ import annotations

import re

import pytest

from tests.support import docs_blocks
from vocabcheck.cli.help import reflow

TYPE_LABEL = re.compile(r"<(bool|str|int|float|path|Path)>|\bBOOLEAN\b")
EDGE = "│"


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "dumb")  # no colour codes in the captured text


def help_text(cli, *command) -> str:
    code, out, err = cli(*command, "--help")
    assert code == 0, err
    return out


def description_lines(text: str) -> list[list[str]]:
    """Runs of text lines to check for early breaks: the paragraphs above the panels, and in each panel row the
    help column (from where the first row's help starts: the longest option's width)."""
    runs: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("╭", "╰", "Usage:")) or not stripped:
            runs.append(current)
            current = []
        elif not stripped.startswith(EDGE):
            current.append(stripped)
    runs.append(current)
    return [run for run in runs if len(run) > 1]


def breaks_early(lines: list[str], width: int) -> str | None:
    """The first line that ends although the next one's first word would have fitted after it."""
    for line, following in zip(lines, lines[1:]):
        if len(line) + 1 + len(following.split()[0]) <= width:
            return line
    return None


@pytest.mark.parametrize("command", [(), *((name,) for name in docs_blocks.commands())], ids=lambda c: " ".join(c)
                         or "vocabcheck")
def test_help_shows_types_only_where_they_help_and_fits_80_columns(cli, command):
    text = help_text(cli, *command)
    assert not TYPE_LABEL.search(text), text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text
    for line in text.splitlines():
        if re.search(r"│ --(json|help|debug|strict|chat|no-probe)(?![\w,-])", line):  # flags: no word for a value
            assert not re.search(r"\b(TEXT|INTEGER|NUMBER|PATH)\b", line), line
    for run in description_lines(text):
        assert breaks_early(run, 78) is None, f"a description breaks mid-sentence:\n{text}"
    arguments = [p for p in (docs_blocks.commands()[command[0]].params if command else ())
                 if p.param_type_name == "argument"]
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage
    for argument in arguments:  # TARGET, [DRAFT], MODELS...
        assert re.search(rf"(?<![\w{{]){argument.name.upper()}\b", usage), usage


def test_the_command_list_says_each_first_sentence_on_filled_lines(cli):
    """bench's description used to break after "greedy output is" and go on on the next line."""
    text = help_text(cli)
    panel = text[text.index("Commands"):]
    rows = [line.strip().strip(EDGE).rstrip() for line in panel.splitlines()[1:] if line.strip().startswith(EDGE)]
    column = len(rows[0]) - len(rows[0][rows[0].index(" ", 1):].lstrip())  # where the descriptions start
    width = max(len(line.strip().strip(EDGE)) for line in panel.splitlines()[1:3]) - column - 1
    entries: list[list[str]] = []
    for row in rows:
        if row[:column].strip():
            entries.append([row[column:].strip()])
        else:
            entries[-1].append(row[column:].strip())
    assert len(entries) == len(docs_blocks.commands()), text
    for lines in entries:
        assert breaks_early(lines, width) is None, f"{lines} breaks early in\n{text}"
    assert any(" ".join(lines).startswith("Time per output token") for lines in entries), text


def test_reflow_joins_a_paragraphs_lines_and_keeps_paragraphs_apart():
    assert reflow("One sentence that\n    goes on.\n\n    Another\n    one.") == "One sentence that goes on.\n\nAnother one."
    assert reflow("\b\nkept\nlines") == "\b\nkept\nlines"
