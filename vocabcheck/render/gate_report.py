"""The views of `vocabcheck gate`: the terminal table, the ``vocabcheck.gate/1`` document, the Markdown summary, and
the text of a failed pair (which the JUnit report in :mod:`vocabcheck.render.junit` carries)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import __version__
from ..gate import Expectation, GateReport, Outcome, PairResult
from .data import GATE_SCHEMA, compare_document, error_document
from .markdown import comparison_markdown, document, escape
from .paths import short_path
from .terminal import VERDICT_STYLE, print_table
from ..text import clip

RESULT_STYLE = {Outcome.PASS: ("✓ pass", "bold green"), Outcome.FAIL: ("✗ FAIL", "bold red"),
                Outcome.ERROR: ("! ERROR", "bold magenta")}
RESULT_ICON = {Outcome.PASS: "✅ pass", Outcome.FAIL: "❌ fail", Outcome.ERROR: "💥 error"}


def summary(report: GateReport) -> str:
    """"3 of 4 pairs as expected, 1 not"."""
    n = len(report.results)
    text = f"{report.count(Outcome.PASS)} of {n} pair{'s' if n != 1 else ''} as expected"
    if report.count(Outcome.FAIL):
        text += f", {report.count(Outcome.FAIL)} not"
    if report.count(Outcome.ERROR):
        text += f", {report.count(Outcome.ERROR)} could not be evaluated"
    return text


def failure_text(result: PairResult) -> str:
    """The unmet expectations, then every finding, one per line: the body of a JUnit failure."""
    lines = list(result.failures)
    if result.comparison is not None:
        lines.append(f"verdict: {result.comparison.verdict.value} — {result.comparison.reason}")
        lines += [f"[{f.severity.value}] {f.code}: {f.message}" for f in result.comparison.findings]
    return "\n".join(lines)


# --- terminal ---------------------------------------------------------------------------------------------------


def print_gate(out: Console, report: GateReport) -> None:
    table = Table(title=f"vocabcheck gate: {short_path(str(report.manifest.path), 60)}", title_justify="left", header_style="bold",
                  expand=False)
    table.add_column("pair", overflow="fold", ratio=2)
    table.add_column("verdict", no_wrap=True)
    table.add_column("expected", overflow="fold")
    table.add_column("result", no_wrap=True)
    table.add_column("top finding", overflow="fold", ratio=3)
    for r in report.results:
        label, style = RESULT_STYLE[r.outcome]
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
                note.append(" " + clip(top.message, 120))
            else:  # only info findings: the verdict's reason says what matters
                note.append(clip(r.comparison.reason, 120), style="dim")
        expected = r.pair.expect.describe() + (" (strict" + (f", allow {', '.join(r.pair.allow)}" if r.pair.allow
                                                             else "") + ")" if r.pair.strict else "")
        table.add_row(_shown_name(r), verdict, expected, Text(label, style=style), note)
    print_table(out, table)
    style = "bold red" if report.exit_code else "bold green"
    out.print(Text(summary(report), style=style)
              + Text(f"  ({report.models} models profiled, {report.tokenizer_diffs} tokenizer diffs, "
                     f"{report.seconds:.1f} s)", style="dim"))


def _shown_name(result: PairResult) -> str:
    """The pair's name; a name the manifest did not give (``TARGET ← DRAFT``) with each path shortened."""
    pair = result.pair
    if pair.name != f"{pair.target} ← {pair.draft}":
        return pair.name
    return f"{short_path(str(pair.target), 32)} ← {short_path(str(pair.draft), 32)}"


# --- JSON -------------------------------------------------------------------------------------------------------


def _expectation_document(expect: Expectation) -> dict[str, Any]:
    return {"kind": "min" if expect.at_least else "expect", "verdict": expect.verdict.value}


def gate_document(report: GateReport) -> dict[str, Any]:
    """The ``--json`` document, schema ``vocabcheck.gate/1`` (``schemas/gate-1.json``)."""
    return {
        "schema": GATE_SCHEMA,
        "vocabcheck_version": __version__,
        "manifest": str(report.manifest.path),
        "exit_code": report.exit_code,
        "summary": {"pairs": len(report.results), "passed": report.count(Outcome.PASS),
                    "failed": report.count(Outcome.FAIL), "errors": report.count(Outcome.ERROR),
                    "models": report.models, "tokenizer_diffs": report.tokenizer_diffs,
                    "seconds": round(report.seconds, 3)},
        "pairs": [{
            "name": r.pair.name,
            "target": r.pair.target,
            "draft": r.pair.draft,
            "target_resolved": r.pair.target_spec,
            "draft_resolved": r.pair.draft_spec,
            "expect": _expectation_document(r.pair.expect),
            "strict": r.pair.strict,
            "allow": list(r.pair.allow),
            "result": r.outcome.value,
            "verdict": r.comparison.verdict.value if r.comparison else None,
            "reason": r.comparison.reason if r.comparison else None,
            "failures": list(r.failures),
            "error": None if r.error is None else error_document(r.error),
            "seconds": round(r.seconds, 3),
            "comparison": compare_document(r.comparison, strict=r.pair.strict) if r.comparison else None,
        } for r in report.results],
    }


# --- Markdown ---------------------------------------------------------------------------------------------------


def gate_markdown(report: GateReport) -> str:
    """A Markdown summary (for ``--markdown`` and ``$GITHUB_STEP_SUMMARY``): the table, then each pair in detail."""
    lines = [f"## vocabcheck gate: `{escape(str(report.manifest.path))}`", "",
             f"**{escape(summary(report))}**.", "",
             "| pair | verdict | expected | result | top finding |", "|---|---|---|---|---|"]
    for r in report.results:
        top = r.top_finding()
        if r.error is not None:
            note = escape(r.error.one_line())
        elif r.failures:
            note = escape("; ".join(r.failures))
        else:
            note = (f"`{top.code}` {escape(clip(top.message, 160))}" if top
                    else escape(clip(r.comparison.reason, 160)))
        lines.append(f"| {escape(r.pair.name)} | {r.comparison.verdict.value if r.comparison else '—'} | "
                     f"{escape(r.pair.expect.describe())}{' (strict)' if r.pair.strict else ''} | "
                     f"{RESULT_ICON[r.outcome]} | {note} |")
    lines.append("")
    for r in report.results:
        lines += ["<details>", f"<summary>{RESULT_ICON[r.outcome]}: {escape(r.pair.name)}</summary>", ""]
        if r.comparison is not None:
            lines += [f"- {escape(failure)}" for failure in r.failures] + ([""] if r.failures else [])
            lines.append(comparison_markdown(r.comparison, strict=r.pair.strict))
        else:
            lines += [f"Could not be evaluated: {escape(r.error.one_line())}", ""]
        lines += ["</details>", ""]
    return document(lines)
