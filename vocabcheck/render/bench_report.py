"""The benchmark as a terminal table, a JSON document, Markdown, and charts (matplotlib)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import __version__, atomic
from ..errors import InputError
from ..bench import BenchResult, Row
from .data import BENCH_SCHEMA
from .markdown import document

LABEL = {"none": "no speculation", "ngram": "n-gram", "draft": "draft model", "hf-none": "transformers, plain",
         "hf-ngram": "transformers, prompt lookup", "hf-draft": "transformers, assisted",
         "hf-draft-uad": "transformers, assisted (different-tokenizer path)",
         "hf-draft-tli": "transformers, assisted (token-level intersection)"}


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def summary_table(result: BenchResult) -> Table:
    """The reference table's shape: TPOT per batch size (rows) and method (columns)."""
    k = result.plan.k
    methods = [m for m in ("none", "ngram", "draft") if any(r.method == m for r in result.rows)]
    table = Table(title=f"Time per output token (median of {result.plan.repeat}, {result.device}, "
                        f"{result.dtype})", header_style="bold")
    table.add_column("batch", justify="right")
    for method in methods:
        table.add_column(LABEL[method] + (f" (k={k})" if method != "none" else ""), justify="right")
    for batch in result.plan.batch_sizes:
        cells = []
        for method in methods:
            row = result.row(method, batch)
            if row is None:
                cells.append("—")
                continue
            text = f"{row.tpot_ms:.2f} ms"
            if method != "none" and row.speedup is not None:
                text += f" ({row.speedup:.2f}×)"
            cells.append(text)
        table.add_row(str(batch), *cells)
    return table


def detail_table(result: BenchResult) -> Table:
    table = Table(title="Per cell", header_style="bold")
    for column in ("method", "batch", "TPOT ms (min–max)", "tokens/s", "accept", "mean len", "speedup", "ideal",
                   "efficiency", "c", "verify cost", "engine eff.", "lossless"):
        table.add_column(column, justify="right" if column not in ("method",) else "left")
    for row in result.rows + result.hf_rows:
        table.add_row(LABEL.get(row.method, row.method), str(row.batch_size),
                      f"{row.tpot_ms:.2f} ({row.tpot_spread_ms[0]:.2f}–{row.tpot_spread_ms[1]:.2f})",
                      f"{row.tokens_per_s:.1f}", _fmt(row.acceptance_rate, ".1%"),
                      _fmt(row.mean_accepted_length, ".2f"), _fmt(row.speedup, ".2f", "×"),
                      _fmt(row.ideal_speedup, ".2f", "×"), _fmt(row.efficiency, ".2f"), _fmt(row.cost_ratio, ".3f"),
                      _fmt(row.verify_cost, ".2f", "×"), _fmt(row.engine_efficiency, ".2f"),
                      {True: "yes", False: "NO", None: "—"}[row.lossless])
    return table


def print_bench(out: Console, result: BenchResult) -> None:
    out.print(summary_table(result))
    out.print(detail_table(result))
    if result.hf_note:
        out.print(Text("transformers: ", style="bold") + Text(result.hf_note))
    if not result.lossless:
        out.print(Text("greedy output differed from plain decoding in a cell marked NO", style="bold red"))
    if result.interrupted:
        out.print(Text("interrupted: the table holds the repeats measured so far", style="bold yellow"))


def row_document(row: Row) -> dict[str, Any]:
    return {"method": row.method, "batch_size": row.batch_size, "tpot_ms": row.tpot_ms,
            "tpot_ms_min": row.tpot_spread_ms[0], "tpot_ms_max": row.tpot_spread_ms[1],
            "tokens_per_s": row.tokens_per_s, "acceptance_rate": row.acceptance_rate,
            "mean_accepted_length": row.mean_accepted_length,
            "acceptance_by_position": list(row.acceptance_by_position), "speedup": row.speedup,
            "ideal_speedup": row.ideal_speedup, "efficiency": row.efficiency, "alpha": row.alpha,
            "cost_ratio": row.cost_ratio, "verify_cost": row.verify_cost,
            "engine_efficiency": row.engine_efficiency, "lossless": row.lossless,
            "note": row.note}


def bench_document(result: BenchResult, *, target: str, draft: str | None, command: str) -> dict[str, Any]:
    plan = result.plan
    return {
        "schema": BENCH_SCHEMA,
        "vocabcheck_version": __version__,
        "command": command,
        "target": target,
        "draft": draft,
        "device": result.device,
        "dtype": result.dtype,
        "plan": {"batch_sizes": list(plan.batch_sizes), "methods": list(plan.methods), "k": plan.k,
                 "max_new_tokens": plan.max_new_tokens, "warmup": plan.warmup, "repeat": plan.repeat,
                 "compare_hf": plan.compare_hf, "temperature": plan.options.sampling.temperature,
                 "seed": plan.options.seed, "translated": result.translated},
        "prompts": result.prompts,
        "seconds": result.seconds,
        "lossless": result.lossless,
        "interrupted": result.interrupted,
        "rows": [row_document(r) for r in result.rows],
        "hf_rows": [row_document(r) for r in result.hf_rows],
        "hf_note": result.hf_note,
    }


def _decoding(result: BenchResult) -> str:
    sampling = result.plan.options.sampling
    text = "greedy" if sampling.greedy else f"sampled at temperature {sampling.temperature:g}"
    return text + (", draft translated through the shared tokens" if result.translated else "")


def bench_markdown(result: BenchResult, *, target: str, draft: str | None, command: str, machine: str) -> str:
    k = result.plan.k
    methods = [m for m in ("none", "ngram", "draft") if any(r.method == m for r in result.rows)]
    lines = ["# vocabcheck bench", "", f"- target: `{target}`", f"- draft: `{draft}`",
             f"- machine: {machine}", f"- device / dtype: {result.device} / {result.dtype}",
             f"- {result.prompts} prompts, {result.plan.max_new_tokens} new tokens each, {_decoding(result)}, k = {k}, "
             f"warm-up {result.plan.warmup}, median of {result.plan.repeat} interleaved repeats",
             f"- command: `{command}`", "", "## Time per output token", "",
             "| batch | " + " | ".join(LABEL[m] + (f" (k={k})" if m != "none" else "") for m in methods) + " |",
             "|---|" + "---|" * len(methods)]
    for batch in result.plan.batch_sizes:
        cells = []
        for method in methods:
            row = result.row(method, batch)
            cells.append("—" if row is None else f"{row.tpot_ms:.2f} ms"
                         + (f" ({row.speedup:.2f}×)" if method != "none" and row.speedup else ""))
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    lines += ["", "## Every cell", "",
              "| method | batch | TPOT ms (min–max) | tokens/s | acceptance | mean accepted length | speedup | ideal | "
              "efficiency | c | verify cost | engine efficiency | lossless |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result.rows + result.hf_rows:
        lines.append(
            f"| {LABEL.get(row.method, row.method)} | {row.batch_size} | {row.tpot_ms:.2f} "
            f"({row.tpot_spread_ms[0]:.2f}–{row.tpot_spread_ms[1]:.2f}) | {row.tokens_per_s:.1f} | "
            f"{_fmt(row.acceptance_rate, '.1%')} | {_fmt(row.mean_accepted_length, '.2f')} | "
            f"{_fmt(row.speedup, '.2f', '×')} | {_fmt(row.ideal_speedup, '.2f', '×')} | {_fmt(row.efficiency, '.2f')} | "
            f"{_fmt(row.cost_ratio, '.3f')} | {_fmt(row.verify_cost, '.2f', '×')} | "
            f"{_fmt(row.engine_efficiency, '.2f')} | { {True: 'yes', False: 'NO', None: '—'}[row.lossless] } |")
    if result.hf_note:
        lines += ["", f"transformers: {result.hf_note}"]
    lines += ["", "![TPOT per method and batch size](tpot.png)", "",
              "![Acceptance per draft position](acceptance.png)", ""]
    return document(lines)


REPORT_FILES = ("bench.md", "bench.json", "tpot.png", "acceptance.png")


def check_destination(directory: Path | None, names: tuple[str, ...] = REPORT_FILES) -> None:
    """Refuse a ``--report`` directory that cannot be written, before the benchmark runs: a path that exists and is
    not a directory, a report file name that is a directory, or a place where the directory cannot be created or
    written (exit code 2). ``None``: no report."""
    if directory is None:
        return
    directory = Path(directory)
    if os.path.lexists(directory) and not directory.is_dir():
        raise InputError("--report exists and is not a directory", directory)
    existing = directory
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"--report cannot be created: {existing} is not a directory", directory)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"--report cannot be written: no permission to write in {existing}", directory)
    for name in names:
        if (directory / name).is_dir():
            raise InputError("is a directory; the benchmark report writes a file of that name", directory / name)


def write_report(directory: Path, result: BenchResult, *, target: str, draft: str | None, command: str,
                 machine: str) -> list[Path]:
    """bench.md, bench.json, tpot.png and acceptance.png in ``directory``, each rendered first, then written
    atomically in that order (each one is old or new, never half). A file that cannot be written (a full disk) is
    one line naming it, exit code 2; a report directory this call created is removed again, so nothing is left."""
    import json

    files = {"bench.md": bench_markdown(result, target=target, draft=draft, command=command, machine=machine),
             "bench.json": json.dumps(bench_document(result, target=target, draft=draft, command=command), indent=2)
             + "\n",
             **_charts(result)}
    return write_files(directory, files, "the benchmark report")


def write_files(directory: Path, files: dict[str, str | bytes], what: str) -> list[Path]:
    """Files rendered in memory, written atomically in order into ``directory`` (created if needed); on failure a
    directory this call created is removed again and an OSError is one line naming the file (exit code 2)."""
    created = directory
    while not os.path.lexists(created.parent) and created.parent != created:
        created = created.parent  # the outermost directory that does not exist yet
    created = None if os.path.lexists(created) else created
    written: list[Path] = []
    path = directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            path = directory / name
            write = atomic.write_text if isinstance(content, str) else atomic.write_bytes
            written.append(write(path, content))
    except BaseException as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {what}: {exc.strerror or exc}", path) from exc
        raise
    return written


def _charts(result: BenchResult) -> dict[str, bytes]:
    """tpot.png and acceptance.png, rendered in memory."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = {}
    methods = [m for m in ("none", "ngram", "draft") if any(r.method == m for r in result.rows)]
    batches = list(result.plan.batch_sizes)
    figure, axis = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(methods), 1)
    for i, method in enumerate(methods):
        values = [getattr(result.row(method, b), "tpot_ms", 0.0) for b in batches]
        positions = [j + (i - (len(methods) - 1) / 2) * width for j in range(len(batches))]
        axis.bar(positions, values, width, label=LABEL[method])
    axis.set_xticks(range(len(batches)), [f"batch {b}" for b in batches])
    axis.set_ylabel("time per output token (ms)")
    axis.set_title(f"TPOT per method and batch size ({result.device}, k={result.plan.k})")
    axis.legend()
    figure.tight_layout()
    charts["tpot.png"] = _png(figure, io)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7, 4))
    for row in result.rows:
        if row.acceptance_by_position:
            axis.plot(range(1, len(row.acceptance_by_position) + 1), row.acceptance_by_position, marker="o",
                      label=f"{LABEL[row.method]}, batch {row.batch_size}")
    axis.set_xlabel("draft position")
    axis.set_ylabel("accepted (fraction of steps)")
    axis.set_ylim(0, 1.05)
    axis.set_title("Acceptance per draft position")
    axis.legend()
    figure.tight_layout()
    charts["acceptance.png"] = _png(figure, io)
    plt.close(figure)
    return charts


def _png(figure, io) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()
