"""The documentation says what the code does: every usage block of README.md and docs/*.md (a fenced block whose info
string is ``usage``) is exactly the synopsis of the command's real options, read from the command line itself, and
the findings table of docs/findings.md is ``vocabcheck.findings.CODES`` with the severities the code gives them.

When a command gains an option, these tests fail and show the block it should be; regenerate every block with
``python -m tests.support.docs_blocks --write`` (:mod:`tests.support.docs_blocks`)."""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Literal

import pytest
import typer

from tests.support import docs_blocks
from tests.support.docs_blocks import ROOT
from vocabcheck.findings import CODES


@pytest.mark.parametrize("document", docs_blocks.documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_usage_blocks_match_the_command_line(document):
    problems = docs_blocks.problems(paths=[document])
    assert not problems, "\n\n".join(problems)


def test_the_readme_has_a_usage_block_for_every_command_and_the_top_level():
    blocks = list(docs_blocks.usage_blocks(ROOT / "README.md"))
    shown = {block.command for block in blocks}
    missing = [name for name in docs_blocks.commands() if name not in shown]
    assert not missing, ("README.md has no usage block for " + ", ".join(missing) + ": add a fence ```usage holding "
                         "`vocabcheck NAME` under its section, then run `python -m tests.support.docs_blocks --write`")
    assert None in shown, "README.md has no usage block of the top level (`vocabcheck [--debug] ...`)"


@pytest.mark.parametrize("name", list(docs_blocks.commands()))
def test_a_synopsis_shows_every_argument_and_option_of_its_command_and_nothing_else(name):
    command = docs_blocks.commands()[name]
    text = docs_blocks.synopsis(name)
    words = set(re.findall(r"(?<![\w-])-{1,2}[\w-]+", text))
    assert words <= docs_blocks.option_names(command), text  # no option the command does not have
    for param in command.params:
        if param.param_type_name == "option" and not param.hidden:
            assert words & {*param.opts, *param.secondary_opts}, f"{param.opts} missing from\n{text}"
        elif param.param_type_name == "argument":
            assert param.name.upper() in text, f"{param.name} missing from\n{text}"
    assert all(len(line) <= docs_blocks.WIDTH for line in text.splitlines()), text


class Colour(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


def _toy():
    app = typer.Typer(add_completion=False)

    @app.callback()
    def _root(verbose: bool = typer.Option(False, "--verbose")) -> None:
        pass

    @app.command("paint")
    def paint(
        wall: str = typer.Argument(...),
        more: list[str] = typer.Argument(None),
        colour: Colour = typer.Option(Colour.RED, "--colour"),
        finish: Literal["matt", "gloss"] = typer.Option("matt", "--finish"),
        coats: int = typer.Option(2, "-c", "--number-of-coats-to-apply"),
        out: Path = typer.Option(..., "--out", "-o", help="The directory to write into."),
        log: Path = typer.Option(None, "--log", help="A file."),
        width: float = typer.Option(None, "--width"),
        note: list[str] = typer.Option(None, "--note"),
        dry: bool = typer.Option(False, "--dry-run"),
        secret: bool = typer.Option(False, "--secret", hidden=True),
    ) -> None:
        pass

    @app.command("idle", hidden=True)
    def idle() -> None:
        pass

    return typer.main.get_command(app)


def test_a_synopsis_shows_choices_defaults_and_what_an_option_takes():
    group = _toy()
    assert list(docs_blocks.commands(group)) == ["paint"]  # hidden commands are not documented
    assert docs_blocks.synopsis("paint", group) == (
        "vocabcheck paint WALL [MORE...] [--colour red|blue] [--finish matt|gloss] [-c 2] --out DIR\n"
        "                 [--log FILE] [--width X] [--note TEXT]... [--dry-run]")
    assert docs_blocks.synopsis(None, group) == "vocabcheck [--verbose] COMMAND [ARGS]..."


def test_a_stale_block_is_reported_with_the_block_it_should_be_and_write_repairs_it(tmp_path):
    (tmp_path / "docs").mkdir()
    stale = "```usage\nvocabcheck inspect MODEL\n```\n"
    (tmp_path / "README.md").write_text(f"# x\n\n{stale}\ntext\n\n```usage\nvocabcheck nosuch --x\n```\n"
                                        "\n```sh\nvocabcheck inspect MODEL\n```\n")
    (tmp_path / "docs" / "page.md").write_text("```usage\nvocabcheck [--debug]\n```\n")
    problems = docs_blocks.problems(tmp_path)
    assert len(problems) == 3
    assert problems[0].startswith("README.md:4: ") and "```usage\nvocabcheck inspect MODEL [--json]\n```" in problems[0]
    assert problems[1].startswith("README.md:10: `vocabcheck nosuch` is not a command")
    assert problems[2].startswith("docs/page.md:2: ") and "vocabcheck [--debug] [--version] COMMAND" in problems[2]

    assert docs_blocks.write(tmp_path) == [tmp_path / "README.md", tmp_path / "docs" / "page.md"]
    readme = (tmp_path / "README.md").read_text()
    assert "```usage\nvocabcheck inspect MODEL [--json]\n```" in readme
    assert "```sh\nvocabcheck inspect MODEL\n```" in readme  # only usage blocks are generated
    assert [p.split(":")[1] for p in docs_blocks.problems(tmp_path)] == ["10"]  # the unknown command is left to fix


def test_the_findings_table_is_findings_codes_in_order():
    page = docs_blocks.FINDINGS_PAGE.read_text(encoding="utf-8")
    rows = docs_blocks.table_rows(page)
    assert list(rows) == list(CODES), "regenerate it: python -m tests.support.docs_blocks --write"
    assert {code: text for code, (_, text) in rows.items()} == CODES
    assert docs_blocks.rewrite_findings(page) == page


def test_the_findings_table_gives_each_code_the_severity_the_code_gives_it():
    rows = docs_blocks.table_rows(docs_blocks.FINDINGS_PAGE.read_text(encoding="utf-8"))
    found = docs_blocks.severities()
    for code, (cell, _) in rows.items():
        documented = set(re.findall(r"[a-z]+", cell))
        assert documented and documented <= set(docs_blocks.SEVERITIES), f"{code}: severity {cell!r} in docs/findings.md"
        given = docs_blocks.severity_of(code, found)
        assert given, f"{code}: no call shaped Finding({code!r}, Severity.X, ...) in vocabcheck/ (extend the scan)"
        assert documented == given, f"{code}: docs/findings.md says {cell!r}, the code gives {sorted(given)}"


def test_the_severity_scan_reads_literal_codes_prefixes_and_keywords(tmp_path):
    (tmp_path / "m.py").write_text(
        "Finding('a.b', Severity.ERROR, 'x')\nFinding(f'pipe.{n}', Severity.WARNING)\n"
        "make(code='c', severity=Severity.INFO)\nFinding(code_var, Severity.INFO)\nFinding('a.b', Severity.INFO)\n")
    found = docs_blocks.severities(tmp_path)
    assert found == {"a.b": {"error", "info"}, "pipe.": {"warning"}, "c": {"info"}}
    assert docs_blocks.severity_of("pipe.normalizer", found) == {"warning"}
    assert docs_blocks.severity_of("other", found) == set()


def test_the_readmes_test_command_is_the_one_ci_runs_and_contributing_names():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip().startswith("sh install.sh")]
    assert ci == ["sh install.sh --test && python3 -m pytest -q"]
    quick_start = (ROOT / "README.md").read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick_start.splitlines() if line.startswith("sh install.sh")]
    assert commands == ["sh install.sh && vocabcheck demo", ci[0]]
    assert f"`{ci[0]}`" in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
