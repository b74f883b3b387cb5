"""The views of `vocabcheck matrix`: the terminal tables, the ``vocabcheck.matrix/1`` document and Markdown."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import __version__
from ..matrix import Matrix, group_pairs
from ..profile import ModelProfile
from ..verdict import Comparison, Verdict
from .data import MATRIX_SCHEMA, alignment_document, error_document, finding_document, profile_summary
from .markdown import document, escape
from .paths import short_paths
from .terminal import VERDICT_STYLE, print_table
from ..text import clip

LEGEND = ("= identical · pad / cut padded-compatible (the draft's rows are padded to / cut at the target's) · "
          "≈ padded-compatible with equal rows · ✗ incompatible; rows are targets, columns drafts")


def cell_symbol(comparison: Comparison) -> str:
    """``=`` identical; ``pad``/``cut``/``≈`` padded-compatible (how the draft's rows map onto the target's, ``≈``
    for equal rows); ``✗`` incompatible."""
    if comparison.verdict is Verdict.IDENTICAL:
        return "="
    if comparison.verdict is Verdict.PADDED_COMPATIBLE:
        return {"pad": "pad", "cut": "cut"}.get(comparison.alignment.mapping, "≈")
    return "✗"


def cost_line(matrix: Matrix) -> str:
    """What the matrix cost: "12 models, 3 tokenizers: 12 profiles, 9 tokenizer diffs, 144 verdicts"."""
    n, g, d = len(matrix.models), len(matrix.groups), matrix.tokenizer_diffs
    return (f"{_count(n, 'model')}, {_count(g, 'tokenizer')}: {_count(n + len(matrix.errors), 'profile')}, "
            f"{_count(d, 'tokenizer diff')}, {_count(n * n, 'verdict')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def rows_text(profile: ModelProfile) -> str:
    emb = profile.embeddings
    if emb.source == "unknown":
        return "unknown"
    text = f"{emb.rows:,}"
    if emb.source == "config":
        return text + " (config)"
    if emb.input_rows is not None and emb.input_rows != emb.rows:
        text += f" (input {emb.input_rows:,})"
    return text + (", tied" if emb.tied else ", untied" if emb.tied is False else "")


# --- terminal ---------------------------------------------------------------------------------------------------


def print_matrix(out: Console, result: Matrix) -> None:
    n = len(result.models)
    groups = Table(title="Tokenizers", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for column in ("", "model", "ids", "fingerprint", "models"):
        groups.add_column(column)
    for g in result.groups:
        tok = result.models[g.members[0]].tokenizer
        groups.add_row(Text(g.id, style="bold"), tok.model_type, f"{tok.size:,}", g.fingerprint[:16],
                       ", ".join(str(i + 1) for i in g.members))
    print_table(out, groups)
    listing = Table(title="Models", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for column in ("#", "tok", "model", "rows"):
        listing.add_column(column, overflow="fold")
    for i, (p, name) in enumerate(zip(result.models, short_paths(result.names))):
        listing.add_row(str(i + 1), result.group_of(i).id, name, rows_text(p))
    print_table(out, listing)
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
        print_table(out, cells, heading_columns=2)  # a wide family is stacked, a block per target, cells whole
        out.print(Text(LEGEND, style="dim"))
        out.print()
        for gp in group_pairs(result):
            for verdict, count in gp.verdicts.items():
                line = Text(f"{gp.target.id} → {gp.draft.id}  ")
                line.append(f"{verdict.value} ×{count}", style=VERDICT_STYLE[verdict])
                line.append(f"  {clip(gp.examples[verdict].reason, 160)}")
                out.print(line)
    for error in result.errors:
        out.print(Text(f"could not be read: {error.error.one_line()}", style="magenta"))
    out.print(Text(f"{cost_line(result)} in {result.seconds:.1f} s", style="dim"))


# --- JSON -------------------------------------------------------------------------------------------------------


def matrix_document(matrix: Matrix) -> dict[str, Any]:
    """The ``--json`` document, schema ``vocabcheck.matrix/1`` (``schemas/matrix-1.json``)."""
    index = {id(p): i for i, p in enumerate(matrix.models)}
    verdicts = matrix.verdicts()
    return {
        "schema": MATRIX_SCHEMA,
        "vocabcheck_version": __version__,
        "exit_code": matrix.exit_code,
        "probe": matrix.probe,
        "summary": {"models": len(matrix.models), "groups": len(matrix.groups), "errors": len(matrix.errors),
                    "pairs": len(matrix.models) ** 2, "profiles": len(matrix.models) + len(matrix.errors),
                    "tokenizer_diffs": matrix.tokenizer_diffs,
                    "verdicts": {v.value: verdicts[v] for v in Verdict}, "seconds": round(matrix.seconds, 3)},
        "groups": [{"id": g.id, "fingerprint": g.fingerprint,
                    "model_type": matrix.models[g.members[0]].tokenizer.model_type,
                    "tokenizer_ids": matrix.models[g.members[0]].tokenizer.size,
                    "models": list(g.members)} for g in matrix.groups],
        "models": [{"index": i, "name": matrix.names[i], "group": matrix.group_of(i).id, **profile_summary(p)}
                   for i, p in enumerate(matrix.models)],
        "cells": [{
            "target": index[id(c.target)],
            "draft": index[id(c.draft)],
            "verdict": c.verdict.value,
            "reason": c.reason,
            "exit_code": 1 if c.failed() else 0,
            "first_divergent_id": c.first_divergent_id,
            # the id ranges are in `vocabcheck compare --json` for the pair; here they would repeat N² times
            "alignment": {k: v for k, v in alignment_document(c.alignment).items()
                          if k not in ("shared_ranges", "renamed_ids")},
            "findings": [{"code": f.code, "severity": f.severity.value} for f in c.findings],
            "top_findings": [finding_document(f) for f in c.top_findings(3)],
        } for row in matrix.cells for c in row],
        "group_pairs": [{"target": gp.target.id, "draft": gp.draft.id,
                         "verdicts": {v.value: n for v, n in gp.verdicts.items()},
                         "reasons": {v.value: c.reason for v, c in gp.examples.items()}}
                        for gp in group_pairs(matrix)],
        "errors": [{"spec": e.spec, **error_document(e.error)} for e in matrix.errors],
    }


# --- Markdown ---------------------------------------------------------------------------------------------------


def matrix_markdown(matrix: Matrix) -> str:
    n = len(matrix.models)
    lines = ["## vocabcheck matrix", "",
             cost_line(matrix) + ".", "",
             "| # | tokenizer | model | rows |", "|---|---|---|---|"]
    for i, p in enumerate(matrix.models):
        g = matrix.group_of(i)
        lines.append(f"| {i + 1} | {g.id} ({escape(p.tokenizer.model_type)}, {p.tokenizer.size:,} ids, "
                     f"`{g.fingerprint[:12]}`) | `{escape(matrix.names[i])}` | {escape(rows_text(p))} |")
    lines += ["", "| target ↓ draft → | " + " | ".join(str(j + 1) for j in range(n)) + " |",
              "|---|" + "---|" * n]
    for i, row in enumerate(matrix.cells):
        lines.append(f"| **{i + 1}** {matrix.group_of(i).id} | "
                     + " | ".join(escape(cell_symbol(c)) for c in row) + " |")
    lines += ["", escape(LEGEND), "", "| target tokenizer | draft tokenizer | verdicts | reason (first pair) |",
              "|---|---|---|---|"]
    for gp in group_pairs(matrix):
        for verdict, count in gp.verdicts.items():
            lines.append(f"| {gp.target.id} | {gp.draft.id} | {verdict.value} ×{count} | "
                         f"{escape(gp.examples[verdict].reason)} |")
    if matrix.errors:
        lines += ["", "Could not be read:", ""] + [f"- {escape(e.error.one_line())}" for e in matrix.errors]
    return document(lines) + "\n"
