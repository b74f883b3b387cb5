"""The views of `vocabcheck align`: the terminal report and the ``vocabcheck.align/1`` document
(``schemas/align-1.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from .. import __version__
from ..aligner import GENERATION_CONFIG, AlignResult
from ..verdict import Comparison
from .data import ALIGN_SCHEMA, alignment_document, finding_document
from .paths import short_paths
from .terminal import pair_title, print_command, verdict_text


def print_aligned(out: Console, result: AlignResult) -> None:
    """What was resized, copied and checked, then the engines' command lines."""
    plan = result.plan
    comparison = plan.comparison
    head = Text.assemble(verdict_text(comparison.verdict), "  ", comparison.reason)
    out.print(Panel(head, title=pair_title(comparison, out.width), title_align="left", expand=True))
    for r in plan.resizes:
        change = f"{r.source_rows:,} → {r.rows:,} rows" if r.rows != r.source_rows else f"{r.rows:,} rows, unchanged"
        extra = f", {r.added:,} zero rows added" if r.added else (f", {r.dropped:,} rows dropped" if r.dropped else "")
        out.print(Text(f" {r.role:<16} {r.name}  {change}{extra} ({r.dtype})"))
    if plan.tied:
        out.print(Text(" lm_head          tied to the input embedding (no lm_head tensor written)"))
    others = sum(s.tensors for s in result.shards) - sum(len(s.resized) for s in result.shards)
    out.print(Text(f" {others:,} other tensors copied byte for byte into {len(result.shards)} shard(s); "
                   f"tokenizer files from the target: {', '.join(plan.tokenizer_files) or 'none'}"))
    for note in plan.notes:
        out.print(Text(f" · {note}", style="dim"))
    target, out_dir = short_paths([comparison.target.spec, str(result.out)])
    check = Text(f"compare {target} {out_dir}: ", style="bold")
    check.append_text(verdict_text(result.verdict_after))
    out.print(check)
    out.print(Text("Serve the pair:", style="bold"))
    for command in result.commands:
        out.print(Text(f"# {command.engine} ({command.docs})", style="dim"), soft_wrap=True)
        if command.validated_by:
            out.print(Text(f"# its speculative config passed {command.validated_by}'s own SpeculativeConfig "
                           "validation", style="dim"), soft_wrap=True)
        print_command(out, command.shell())


def align_document(result: AlignResult) -> dict[str, Any]:
    """The ``vocabcheck.align/1`` document of a finished alignment and the engine command lines for it."""
    plan = result.plan
    document = _pair_document(plan.comparison, status="aligned", exit_code=0)
    document.update({
        "out": str(result.out),
        "aligned": {
            "verdict_after": result.verdict_after.value,
            "target_rows": plan.target_rows,
            "target_input_rows": plan.target_input_rows,
            "config_vocab_size": plan.target_rows,
            "tied": plan.tied,
            "tensors": [{"name": r.name, "role": r.role, "file": r.file, "dtype": r.dtype, "hidden": r.hidden,
                         "source_rows": r.source_rows, "rows": r.rows, "kept_rows": r.kept, "added_rows": r.added,
                         "dropped_rows": r.dropped} for r in plan.resizes],
            "shards": [{"file": s.file, "tensors": s.tensors, "bytes": s.bytes, "parameters": s.parameters,
                        "resized": list(s.resized)} for s in result.shards],
            "index": plan.index,
            "copied": list(result.copied),
            "left_out": list(plan.left_out),
            "draft_tokens_cut": plan.draft_tokens_cut,
            "generation_config": "draft" if GENERATION_CONFIG in plan.draft_files else None,
        },
        "commands": [c.document() for c in result.commands],
        "notes": list(plan.notes),
    })
    return document


def refusal_document(comparison: Comparison, out: str | Path | None) -> dict[str, Any]:
    """The ``vocabcheck.align/1`` document of a pair that align refuses (exit code 1)."""
    document = _pair_document(comparison, status="refused", exit_code=1)
    document.update({"out": None if out is None else str(out), "aligned": None, "commands": [],
                     "notes": [f"{f.code}: {f.message}" for f in comparison.top_findings()]})
    return document


def _pair_document(comparison: Comparison, *, status: str, exit_code: int) -> dict[str, Any]:
    return {
        "schema": ALIGN_SCHEMA,
        "vocabcheck_version": __version__,
        "status": status,
        "exit_code": exit_code,
        "target": {"spec": comparison.target.spec, "location": comparison.target.location},
        "draft": {"spec": comparison.draft.spec, "location": comparison.draft.location},
        "verdict": comparison.verdict.value,
        "reason": comparison.reason,
        "findings": [finding_document(f) for f in comparison.findings],
        "alignment": alignment_document(comparison.alignment),
    }
