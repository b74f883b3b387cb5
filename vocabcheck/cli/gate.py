"""`vocabcheck gate` (a CI gate over a TOML manifest of pairs) and `vocabcheck matrix` (a family's verdict matrix)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .app import app
from .output import emit_json, write_outputs

RESULT_STYLE = {"pass": ("✓ pass", "bold green"), "fail": ("✗ FAIL", "bold red"), "error": ("! ERROR", "bold magenta")}


@app.command()
def gate(
    manifest: Path = typer.Argument(..., help="TOML manifest: \\[\\[pair]] tables with target, draft and expect "
                                              "(or min), optional name, strict and allow."),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML (one testcase per pair) to this file."),
    json_file: Path = typer.Option(None, "--json", "--json-file",
                                   help="Write the report as JSON (schema vocabcheck.gate/1) to this file."),
    markdown: Path = typer.Option(None, "--markdown", help="Write the report as Markdown to this file (it is also "
                                                           "appended to $GITHUB_STEP_SUMMARY when that is set)."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Skip the encoding probe of differing tokenizers."),
) -> None:
    """Check every pair of a manifest against the verdict it must get; for CI.

    Exit code 0 when every pair is as expected, 1 when some are not, 2 when the manifest or a model cannot be read.
    A model that cannot be read errors its pairs only: the other pairs are still evaluated and reported.
    """
    from ..gate import gate_document, gate_markdown, load_manifest, run_gate
    from ..render import data, junit as junit_xml, terminal

    report = run_gate(load_manifest(manifest), probe=not no_probe)
    out = terminal.console()
    print_gate(out, report)
    for message in dict.fromkeys(r.error.one_line() for r in report.results if r.error is not None):
        print(f"error: {message}", file=sys.stderr)
    text = gate_markdown(report)
    files = {junit: lambda: junit_xml.gate_junit(report), json_file: lambda: data.dumps(gate_document(report)),
             markdown: lambda: text}
    summary = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if summary:
        files[Path(summary)] = lambda: _appended(Path(summary), text)
    write_outputs(files)
    raise typer.Exit(report.exit_code)


def _appended(path: Path, text: str) -> str:
    from ..errors import InputError

    try:
        existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read $GITHUB_STEP_SUMMARY: {getattr(exc, 'strerror', None) or exc}", path) from exc
    return existing + ("\n" if existing and not existing.endswith("\n") else "") + text


def print_gate(out: Console, report) -> None:
    from ..render.terminal import VERDICT_STYLE

    table = Table(title=f"vocabcheck gate: {report.manifest.path}", title_justify="left", header_style="bold",
                  expand=False)
    table.add_column("pair", overflow="fold", ratio=2)
    table.add_column("verdict", no_wrap=True)
    table.add_column("expected", overflow="fold")
    table.add_column("result", no_wrap=True)
    table.add_column("top finding", overflow="fold", ratio=3)
    for r in report.results:
        label, style = RESULT_STYLE[r.outcome.value]
        verdict = (Text(r.comparison.verdict.value, style=VERDICT_STYLE[r.comparison.verdict]) if r.comparison
                   else Text("—"))
        note = Text()
        if r.error is not None:
            note.append(r.error.one_line(), style="magenta")
        else:
            for failure in r.failures:
                note.append(failure + "\n", style="red")
            top = r.top_finding()
            if top is not None:
                note.append(top.code, style="bold")
                note.append(" " + _clip(top.message, 120))
            else:  # only info findings: the verdict's reason says what matters
                note.append(_clip(r.comparison.reason, 120), style="dim")
        expected = r.pair.expect.describe() + (" (strict" + (f", allow {', '.join(r.pair.allow)}" if r.pair.allow
                                                             else "") + ")" if r.pair.strict else "")
        table.add_row(r.pair.name, verdict, expected, Text(label, style=style), note)
    out.print(table)
    style = "bold red" if report.exit_code else "bold green"
    out.print(Text(report.summary(), style=style)
              + Text(f"  ({report.models} models profiled, {report.tokenizer_diffs} tokenizer diffs, "
                     f"{report.seconds:.1f} s)", style="dim"))


@app.command()
def matrix(
    models: list[str] = typer.Argument(..., help="Model directories or tokenizer files, or a directory of model "
                                                 "directories."),
    json_out: bool = typer.Option(False, "--json", help="Print the matrix as JSON (schema vocabcheck.matrix/1)."),
    json_file: Path = typer.Option(None, "--json-file", help="Also write the JSON document to this file."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write the matrix as Markdown to this file."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Skip the encoding probe of differing tokenizers."),
) -> None:
    """The verdict of every ordered pair of a model family, for N profiles and one diff per pair of tokenizers.

    Each cell is what `vocabcheck compare TARGET DRAFT` says. Exit code 0, or 2 when a model cannot be read (the
    others are still shown).
    """
    from ..matrix import build_matrix, expand_specs, matrix_document, matrix_markdown
    from ..render import data, terminal

    result = build_matrix(expand_specs(models), probe=not no_probe)
    document = matrix_document(result) if json_out or json_file else None
    write_outputs({json_file: lambda: data.dumps(document), markdown: lambda: matrix_markdown(result)})
    if json_out:
        emit_json(document)
    else:
        print_matrix(terminal.console(), result)
    for error in result.errors:
        print(f"error: {error.error.one_line()}", file=sys.stderr)
    raise typer.Exit(result.exit_code)


def print_matrix(out: Console, result) -> None:
    from rich import box

    from ..matrix import LEGEND, cell_symbol, cost_line, group_pairs, rows_text
    from ..render.terminal import VERDICT_STYLE

    n = len(result.models)
    groups = Table(title="Tokenizers", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for column in ("", "model", "ids", "fingerprint", "models"):
        groups.add_column(column)
    for g in result.groups:
        tok = result.models[g.members[0]].tokenizer
        groups.add_row(Text(g.id, style="bold"), tok.model_type, f"{tok.size:,}", g.fingerprint[:16],
                       ", ".join(str(i + 1) for i in g.members))
    out.print(groups)
    listing = Table(title="Models", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for column in ("#", "tok", "model", "rows"):
        listing.add_column(column, overflow="fold")
    for i, p in enumerate(result.models):
        listing.add_row(str(i + 1), result.group_of(i).id, result.names[i], rows_text(p))
    out.print(listing)
    if n:
        out.print(Text("Verdicts (row: target, column: draft)", style="italic"))
        cells = Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
        cells.add_column("#", justify="right")
        cells.add_column("tok")
        for j in range(n):
            cells.add_column(str(j + 1), justify="center", no_wrap=True)
        for i, row in enumerate(result.cells):
            cells.add_row(str(i + 1), result.group_of(i).id,
                          *(Text(cell_symbol(c), style=VERDICT_STYLE[c.verdict]) for c in row))
        out.print(cells, width=max(out.width, 12 + 5 * n))  # a wide family overflows rather than shrink its cells
        out.print(Text(LEGEND, style="dim"))
        out.print()
        for gp in group_pairs(result):
            for verdict, count in gp.verdicts.items():
                line = Text(f"{gp.target.id} → {gp.draft.id}  ")
                line.append(f"{verdict.value} ×{count}", style=VERDICT_STYLE[verdict])
                line.append(f"  {_clip(gp.examples[verdict].reason, 160)}")
                out.print(line)
    for error in result.errors:
        out.print(Text(f"could not be read: {error.error.one_line()}", style="magenta"))
    out.print(Text(f"{cost_line(result)} in {result.seconds:.1f} s", style="dim"))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
