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
from ..methods import SPECULATIVE, Method
from ..provenance import Provenance, current
from ..bench import AUTO, BenchResult, Row
from .data import BENCH_SCHEMA
from .markdown import document, escape
from .terminal import print_table

LABEL = {**{m.value: m.label for m in Method}, "hf-none": "transformers, plain",
         "hf-ngram": "transformers, prompt lookup", "hf-draft": "transformers, assisted",
         "hf-draft-uad": "transformers, assisted (different-tokenizer path)",
         "hf-draft-tli": "transformers, assisted (token-level intersection)"}


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def label(method: str, k=None) -> str:
    """A cell's name: the method, and its k where it proposes tokens."""
    name = LABEL.get(method, method)
    if method in (Method.NONE, "hf-none") or k is None:
        return name
    return f"{name} ({'auto' if k == AUTO else f'k={k}'})"


def _columns(result: BenchResult) -> list[tuple[str, object]]:
    """The summary's columns: plain decoding, then each speculative method at each k that has a row."""
    columns = [(Method.NONE, 0)] if any(r.method == Method.NONE for r in result.rows) else []
    for method in SPECULATIVE:
        measured = {r.k for r in result.rows if r.method == method}
        columns += [(method, k) for k in result.ks if k in measured]
    return columns


def _summary_cell(result: BenchResult, method: str, k, batch: int) -> str:
    row = result.row(method, batch, k)
    if row is None:
        return "—"
    text = f"{row.tpot_ms:.2f} ms"
    if row.noise:  # not quoted as a result: the cell's line below says why
        return text + " (noisy)"
    if method != Method.NONE and row.speedup is not None:
        text += f" ({row.speedup:.2f}×)"
    return text


def _noise_lines(result: BenchResult) -> list[str]:
    return [f"{label(r.method, r.k)}, batch {r.batch_size}: {r.noise}" for r in result.rows + result.hf_rows
            if r.noise]


def _title(result: BenchResult) -> str:
    title = f"Time per output token (median of {result.plan.repeat}, {result.device}, {result.dtype})"
    return title + (f" — PARTIAL: {_partial(result)}" if result.partial else "")


def _partial(result: BenchResult) -> str:
    measured = len(result.rows) + len(result.hf_rows)
    return (f"interrupted during repeat {result.repeats_done + 1} of {result.plan.repeat}; {measured} of "
            f"{result.cells_planned} cells measured")


def summary_table(result: BenchResult) -> Table:
    """The reference table's shape: TPOT per batch size (rows) and method at each k (columns)."""
    columns = _columns(result)
    table = Table(title=_title(result), header_style="bold")
    table.add_column("batch", justify="right")
    for method, k in columns:
        table.add_column(label(method, k), justify="right")
    for batch in result.plan.batch_sizes:
        table.add_row(str(batch), *(_summary_cell(result, method, k, batch) for method, k in columns))
    return table


DETAIL = ("method", "batch", "prompts", "TPOT ms (min–max)", "tokens/s", "accept", "mean len", "proposed/step",
          "speedup", "ideal", "efficiency", "c", "verify cost", "engine eff.", "lossless")


PREDICTED = ("pred. k", "pred. accept", "pred. mean len")  # beside `predicted` (the speedup) where a full
# prediction was made (bench --predict)


def _detail(row: Row, predicted: tuple[str, ...]) -> list[str]:
    cells = [label(row.method, row.k), str(row.batch_size), str(row.prompts),
             f"{row.tpot_ms:.2f} ({row.tpot_spread_ms[0]:.2f}–{row.tpot_spread_ms[1]:.2f})",
             f"{row.tokens_per_s:.1f}", _fmt(row.acceptance_rate, ".1%"), _fmt(row.mean_accepted_length, ".2f"),
             _fmt(row.mean_proposed, ".2f"), _fmt(row.speedup, ".2f", "×"), _fmt(row.ideal_speedup, ".2f", "×"),
             _fmt(row.efficiency, ".2f"), _fmt(row.cost_ratio, ".3f"), _fmt(row.verify_cost, ".2f", "×"),
             _fmt(row.engine_efficiency, ".2f"), {True: "yes", False: "NO", None: "—"}[row.lossless]]
    values = {"pred. k": "—" if row.predicted_k is None else str(row.predicted_k),
              "pred. accept": _fmt(row.predicted_acceptance_rate, ".1%"),
              "pred. mean len": _fmt(row.predicted_mean_accepted_length, ".2f"),
              "predicted": _fmt(row.predicted_speedup, ".2f", "×")}
    return cells + [values[column] for column in predicted]


def _predicted(result: BenchResult) -> tuple[str, ...]:
    """The prediction's columns: none, the speedup alone, or (bench --predict) its k, acceptance and mean accepted
    length too."""
    if any(r.predicted_mean_accepted_length is not None for r in result.rows):
        return PREDICTED + ("predicted",)
    return ("predicted",) if any(r.predicted_speedup is not None for r in result.rows) else ()


def _failure_lines(result: BenchResult) -> list[str]:
    return [f"{label(f.method, f.k)}, batch {f.batch_size}: failed — {f.reason}" for f in result.failures]


def detail_table(result: BenchResult) -> Table:
    table = Table(title="Per cell", header_style="bold")
    predicted = _predicted(result)
    for column in DETAIL + predicted:
        table.add_column(column, justify="right" if column != "method" else "left")
    for row in result.rows + result.hf_rows:
        table.add_row(*_detail(row, predicted))
    return table


VLLM_HEADER = ("method", "batch", "k", "vLLM TPOT ms", "vocabcheck TPOT ms", "vLLM / vocabcheck",
               "vLLM tok/s", "vocabcheck tok/s", "accepted len vLLM / ours", "greedy identical")


def _vllm_cells(row) -> list[str]:
    same = {True: "yes", False: "NO", None: "n/a (sampled)"}[row.identical]
    k = "-" if row.method == Method.NONE else str(row.k)
    return [row.method, str(row.batch_size), f"served table: {row.k}" if row.served else k,
            f"{row.vllm_tpot_ms:.2f}", f"{row.vocabcheck_tpot_ms:.2f}", f"{row.tpot_ratio:.2f}x",
            f"{row.vllm_tokens_per_s:.1f}", f"{row.vocabcheck_tokens_per_s:.1f}",
            f"{row.vllm_mean_accepted_length:.2f} / {row.vocabcheck_mean_accepted_length:.2f}", same]


SERVED_HEADER = ("engine", "method", "batch", "served k", "speedup", "predicted", "best fixed k", "best speedup",
                 "served / best")


def _served_cells(row) -> list[str]:
    return [row.engine, row.method, str(row.batch_size), str(row.k), f"{row.speedup:.2f}x",
            f"{row.predicted_speedup:.2f}x", str(row.best_k), f"{row.best_speedup:.2f}x", f"{row.of_best:.2f}"]


SERVED_NOTE = ("speedup: TPOT of plain decoding over the served k's on the same engine (k 0: plain decoding, 1.00x); "
               "best: the fastest of every fixed k measured and plain decoding; on vocabcheck's decoder the served "
               "k is that fixed-k cell, on vLLM one engine running predict's speculative_config for every batch size, "
               "run beside plain decoding's and every fixed k's engine in the same repeats: each ratio is of two "
               "engines run one right after the other")


def print_bench(out: Console, result: BenchResult) -> None:
    print_table(out, summary_table(result))
    print_table(out, detail_table(result), heading_columns=2)
    if result.vllm_rows:
        table = Table(title="vLLM beside vocabcheck", title_justify="left")
        for name in VLLM_HEADER:
            table.add_column(name)
        for row in result.vllm_rows:
            table.add_row(*_vllm_cells(row))
        print_table(out, table)
        out.print(Text("vLLM: ", style="bold") + Text(result.vllm_note))
    served = result.served
    if served:
        table = Table(title="The served table (predict's k per batch size)", title_justify="left")
        for name in SERVED_HEADER:
            table.add_column(name)
        for row in served:
            table.add_row(*_served_cells(row))
        print_table(out, table)
        out.print(Text("served: ", style="bold") + Text(SERVED_NOTE))
    for line in _noise_lines(result):
        out.print(Text("noisy: ", style="bold yellow") + Text(line))
    for line in _failure_lines(result):
        out.print(Text("transformers: ", style="bold yellow") + Text(line))
    if result.hf_note:
        out.print(Text("transformers: ", style="bold") + Text(result.hf_note))
    if not result.lossless:
        out.print(Text("greedy output differed from plain decoding in a cell marked NO", style="bold red"))


def interrupted_line(result: BenchResult, report: Path | None) -> Text:
    """The one line an interrupted bench ends with (on stderr)."""
    if not (result.rows or result.hf_rows):
        return Text("interrupted before any cell was measured; no report written", style="bold yellow")
    where = f"; the report in {report} says it is partial" if report is not None else ""
    return Text(f"{_partial(result)}{where}", style="bold yellow")


def row_document(row: Row) -> dict[str, Any]:
    return {"method": row.method, "batch_size": row.batch_size, "k": row.k, "prompts": row.prompts,
            "tpot_ms": row.tpot_ms, "tpot_ms_min": row.tpot_spread_ms[0], "tpot_ms_max": row.tpot_spread_ms[1],
            "tokens_per_s": row.tokens_per_s, "acceptance_rate": row.acceptance_rate,
            "mean_accepted_length": row.mean_accepted_length, "mean_proposed": row.mean_proposed,
            "acceptance_by_position": list(row.acceptance_by_position), "speedup": row.speedup,
            "ideal_speedup": row.ideal_speedup, "efficiency": row.efficiency, "alpha": row.alpha,
            "cost_ratio": row.cost_ratio, "verify_cost": row.verify_cost,
            "engine_efficiency": row.engine_efficiency, "lossless": row.lossless,
            "accepted_tokens": row.accepted_tokens, "predicted_speedup": row.predicted_speedup,
            "predicted_k": row.predicted_k, "predicted_acceptance_rate": row.predicted_acceptance_rate,
            "predicted_mean_accepted_length": row.predicted_mean_accepted_length,
            "predicted_accepted_tokens": row.predicted_accepted_tokens, "note": row.note,
            "noise": row.noise or None}


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
                 "ks": list(plan.ks), "max_new_tokens": plan.max_new_tokens, "warmup": plan.warmup,
                 "repeat": plan.repeat, "compare_hf": plan.compare_hf,
                 "temperature": plan.options.sampling.temperature, "seed": plan.options.seed,
                 "translated": result.translated,
                 "served": [{"method": t.method, "per_batch_size": [{"batch_size": r.batch_size, "k": r.k}
                                                                    for r in t.rows],
                             "schedule": [list(r) for r in t.schedule()]} for t in plan.served]},
        "prompts": result.prompts,
        "seconds": result.seconds,
        "lossless": result.lossless,
        "interrupted": result.interrupted,
        "partial": result.partial,
        "repeats_done": result.repeats_done,
        "rows": [row_document(r) for r in result.rows],
        "hf_rows": [row_document(r) for r in result.hf_rows],
        "hf_failed": [{"method": f.method, "batch_size": f.batch_size, "k": f.k, "reason": f.reason}
                      for f in result.failures],
        "hf_note": result.hf_note,
        "vllm_rows": [row.document() for row in result.vllm_rows],
        "vllm_note": result.vllm_note,
        "served": [row.document() for row in result.served],
    }


def _decoding(result: BenchResult) -> str:
    sampling = result.plan.options.sampling
    text = "greedy" if sampling.greedy else f"sampled at temperature {sampling.temperature:g}"
    return text + (", draft translated through the shared tokens" if result.translated else "")


def _ks(result: BenchResult) -> str:
    return ", ".join(str(k) for k in result.ks)


def bench_markdown(result: BenchResult, *, target: str, draft: str | None, command: str, machine: str,
                   provenance: Provenance | None = None) -> str:
    """The report's Markdown; its header names the commit, the date and the machine (``provenance``, else this
    checkout's now, on ``machine``)."""
    provenance = provenance or current(machine)
    columns = _columns(result)
    plan = result.plan
    lines = ["# vocabcheck bench", ""]
    if result.partial:
        lines += [f"**PARTIAL — {_partial(result)}.** The figures below are not the full benchmark.", ""]
    lines += [f"- target: `{target}`", f"- draft: `{draft}`",
              f"- {provenance.line()}", f"- device / dtype: {result.device} / {result.dtype}",
              f"- {result.prompts} prompts, {plan.max_new_tokens} new tokens each (eos ignored), {_decoding(result)}, "
              f"k = {_ks(result)}, warm-up {plan.warmup}, median of {plan.repeat} interleaved repeats",
              "- every cell runs every prompt, in batches of its size (prompts cycled to fill the last batch); "
              "the `prompts` column says how many sequences each repeat of a cell ran",
              "- TPOT: per sequence, from its first token to its last, over the tokens after the first (prefill "
              "excluded), averaged over sequences; transformers' rows are timed the same way (a streamer) and "
              "run interleaved with vocabcheck's",
              f"- command: `{command}`", "", "## Time per output token", "",
              "| batch | " + " | ".join(escape(label(m, k)) for m, k in columns) + " |",
              "|---|" + "---|" * len(columns)]
    for batch in plan.batch_sizes:
        lines.append(f"| {batch} | " + " | ".join(_summary_cell(result, m, k, batch) for m, k in columns) + " |")
    predicted = _predicted(result)
    header = DETAIL + predicted
    lines += ["", "## Every cell", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(escape(c) for c in _detail(row, predicted)) + " |"
              for row in result.rows + result.hf_rows]
    if _noise_lines(result):
        lines += ["", "Noisy cells (not quoted as results; run again on a quieter machine or with more repeats):", ""]
        lines += [f"- {escape(line)}" for line in _noise_lines(result)]
    if result.failures:
        lines += ["", "transformers' cells that failed (their rows are left out):", ""]
        lines += [f"- {escape(line)}" for line in _failure_lines(result)]
    if result.hf_note:
        lines += ["", f"transformers: {result.hf_note}"]
    if result.vllm_rows:
        lines += ["", "## vLLM beside vocabcheck", "", f"{result.vllm_note}.", "",
                  "| " + " | ".join(VLLM_HEADER) + " |", "|" + "---|" * len(VLLM_HEADER)]
        lines += ["| " + " | ".join(escape(c) for c in _vllm_cells(row)) + " |" for row in result.vllm_rows]
    if result.served:
        lines += ["", "## The served table", "", f"{SERVED_NOTE}.", "",
                  "| " + " | ".join(SERVED_HEADER) + " |", "|" + "---|" * len(SERVED_HEADER)]
        lines += ["| " + " | ".join(escape(c) for c in _served_cells(row)) + " |" for row in result.served]
    lines += ["", "![TPOT per method and batch size](tpot.png)", "",
              "![Acceptance per draft position](acceptance.png)", ""]
    return document(lines)


REPORT_FILES = ("bench.md", "bench.json", "tpot.png", "acceptance.png")


def check_destination(directory: Path | None, names: tuple[str, ...] = REPORT_FILES,
                      what: str = "the benchmark report") -> None:
    """Refuse a ``--report`` directory that cannot be written, before the benchmark runs: a path that exists and is
    not a directory, a report file name that is a directory or a special file (a FIFO, a device, a socket: the same
    line :func:`write_files` would give after the run), or a place where the directory cannot be created or written
    (exit code 2). ``None``: no report."""
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
        path = directory / name
        if path.is_dir():
            raise InputError(f"is a directory; {what} writes a file of that name", path)
        try:
            atomic.check_writable(path)
        except atomic.NotARegularFile as exc:
            raise InputError(f"cannot write {what}: {exc.strerror}", path) from exc


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
    """tpot.png and acceptance.png, rendered in memory. A chart without data (an interrupted run) says so instead
    of drawing empty axes; matplotlib's own warnings (a legend with nothing to show, a layout it cannot fit) never
    reach the user's terminal."""
    import io
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = {}
    partial = " — partial" if result.partial else ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        columns = _columns(result)
        batches = list(result.plan.batch_sizes)
        figure, axis = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(len(columns), 1)
        for i, (method, k) in enumerate(columns):
            values = [getattr(result.row(method, b, k), "tpot_ms", 0.0) for b in batches]
            positions = [j + (i - (len(columns) - 1) / 2) * width for j in range(len(batches))]
            axis.bar(positions, values, width, label=label(method, k))
        axis.set_xticks(range(len(batches)), [f"batch {b}" for b in batches])
        axis.set_ylabel("time per output token (ms)")
        axis.set_title(f"TPOT per method and batch size ({result.device}, k = {_ks(result)}){partial}")
        _finish(axis)
        figure.tight_layout()
        charts["tpot.png"] = _png(figure, io)
        plt.close(figure)

        figure, axis = plt.subplots(figsize=(7, 4))
        for row in result.rows:
            if row.acceptance_by_position:
                axis.plot(range(1, len(row.acceptance_by_position) + 1), row.acceptance_by_position, marker="o",
                          label=f"{label(row.method, row.k)}, batch {row.batch_size}")
        axis.set_xlabel("draft position")
        axis.set_ylabel("accepted (fraction of steps)")
        axis.set_ylim(0, 1.05)
        axis.set_title(f"Acceptance per draft position{partial}")
        _finish(axis)
        figure.tight_layout()
        charts["acceptance.png"] = _png(figure, io)
        plt.close(figure)
    return charts


def _finish(axis) -> None:
    """A legend where something is labelled; otherwise the axes say that nothing was measured."""
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize="small")
    else:
        axis.text(0.5, 0.5, "nothing measured", transform=axis.transAxes, ha="center", va="center")


def _png(figure, io) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()
