"""The prediction as a ranked terminal table, a JSON document (``vocabcheck.predict/1``), Markdown, and a chart of
predicted speedup against k per candidate (matplotlib)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import __version__
from ..methods import Method
from ..predict.result import Candidate, KPrediction, Prediction
from ..predict.serving import MARGIN, ServeConfig
from .bench_report import check_destination as _check, write_files
from .data import PREDICT_SCHEMA
from .markdown import document, escape
from .paths import short_paths
from .terminal import print_command, print_table
from ..text import printable

REPORT_FILES = ("predict.md", "predict.json", "speedup.png")


def _name(candidate: Candidate) -> str:
    if not candidate.method.needs_draft:
        return "n-gram lookup"
    return candidate.draft + (" (translated)" if candidate.translated else "")


def _shown_names(prediction: Prediction) -> dict[int, str]:
    """Each candidate's name as the terminal shows it (by its place in the ranking): a draft's path keeps its
    distinctive tail, and two drafts never look alike."""
    drafts = short_paths([c.draft if c.method.needs_draft else "" for c in prediction.candidates], 30)
    return {i: _name(c) if not c.method.needs_draft else drafts[i] + (" (translated)" if c.translated else "")
            for i, c in enumerate(prediction.candidates)}


def _speedup(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _settings(prediction: Prediction) -> str:
    source = "recorded responses" if prediction.source == "recorded" else "the target's own greedy sequences"
    engine = "" if prediction.engine == "vocabcheck" else f", steps timed on {prediction.engine}"
    return (f"{prediction.prompts} prompts, {prediction.tokens} target tokens ({source}), batch size "
            f"{prediction.batch_size}, {prediction.device} / {prediction.dtype}{engine}, predicted in "
            f"{prediction.seconds:.1f} s")


def ranked_table(prediction: Prediction) -> Table:
    table = Table(title=f"Predicted, greedy ({_settings(prediction)})", header_style="bold")
    names = _shown_names(prediction)
    for column in ("candidate", "rank", "best k", "acceptance", "mean accepted length", "accepted tokens",
                   "predicted speedup", "c"):
        table.add_column(column, justify="left" if column == "candidate" else "right")
    for rank, candidate in enumerate(prediction.candidates, start=1):
        best = candidate.best
        if best is None:
            table.add_row(Text(printable(names[rank - 1])), str(rank), "—", "—", "—", "—", "—",
                          Text(printable(candidate.refused or "not predicted")))
            continue
        c = candidate.costs.cost_ratio if candidate.costs is not None else None
        table.add_row(Text(printable(names[rank - 1])), str(rank), str(best.k), f"{best.counts.acceptance_rate:.1%}",
                      f"{best.counts.mean_accepted_length:.2f}", f"{best.counts.accepted:.0f}",
                      _speedup(best.speedup), "—" if c is None else f"{c:.3f}")
    return table


def k_table(prediction: Prediction, temperature: float | None = None) -> Table:
    """Predicted speedup (mean accepted length) per candidate and k, greedy or at one temperature."""
    label = "greedy" if temperature is None else f"temperature {temperature:g} (expected)"
    table = Table(title=f"Predicted speedup (mean accepted length) per k, {label}", header_style="bold")
    table.add_column("candidate")
    for k in prediction.k_values:
        table.add_column(f"k={k}", justify="right")
    names = _shown_names(prediction)
    for index, candidate in enumerate(prediction.candidates):
        rows = _per_k(candidate, temperature)
        if rows:
            table.add_row(Text(printable(names[index])), *(_cell(p) for p in rows))
    return table


def _per_k(candidate: Candidate, temperature: float | None) -> tuple[KPrediction, ...]:
    if temperature is None:
        return candidate.greedy
    return next((rows for t, rows in candidate.sampled if t == temperature), ())


def _cell(p: KPrediction) -> str:
    return f"{_speedup(p.speedup)} ({p.counts.mean_accepted_length:.2f})"


def noise_line(prediction: Prediction) -> str | None:
    """What the views say where the costs were measured on a disturbed machine: the speedups (and so the ranking
    and best k) are not a result; the acceptance is."""
    if not prediction.noise:
        return None
    return (f"speedups too noisy to rank ({prediction.noise}): the acceptance stands; measure the costs again on a "
            "quieter machine")


def _many(predictions: Prediction | Sequence[Prediction]) -> tuple[Prediction, ...]:
    """One prediction per batch size, the first shown in full (a single prediction is one batch size)."""
    return (predictions,) if isinstance(predictions, Prediction) else tuple(predictions)


def print_prediction(out: Console, predictions: Prediction | Sequence[Prediction],
                     serve: Sequence[ServeConfig] = ()) -> None:
    predictions = _many(predictions)
    prediction = predictions[0]
    print_table(out, ranked_table(prediction))
    if noise_line(prediction):
        out.print(Text(printable(noise_line(prediction)), style="yellow"))
    print_table(out, k_table(prediction))
    for temperature in prediction.temperatures:
        print_table(out, k_table(prediction, temperature))
    names = _shown_names(prediction)
    for index, candidate in enumerate(prediction.candidates):
        if candidate.refused:
            out.print(Text(printable(f"{names[index]}: {candidate.refused}")))
    _print_serving(out, predictions, serve)


def serve_table(predictions: Sequence[Prediction], serve: Sequence[ServeConfig]) -> Table:
    sizes = [p.batch_size for p in sorted(predictions, key=lambda p: p.batch_size)]
    table = Table(title=f"Serve with (k per batch size, predicted speedup; 0: draft nothing, where no k is predicted "
                        f"{MARGIN:.0%} faster than that)", header_style="bold")
    table.add_column("candidate")
    for size in sizes:
        table.add_column(f"batch {size}", justify="right")
    names = short_paths([item.plan.draft if item.plan.method.needs_draft else "n-gram lookup" for item in serve], 30)
    for name, item in zip(names, serve):
        cells = {row.batch_size: _serve_cell(row) for row in item.plan.rows}
        table.add_row(Text(printable(name)), *(cells[size] for size in sizes))
    return table


def _print_serving(out: Console, predictions: Sequence[Prediction], serve: Sequence[ServeConfig]) -> None:
    noisy = next((p for p in predictions if p.noise), None)
    if noisy is not None:
        out.print(Text(f"no k to serve with: the costs at batch {noisy.batch_size} were disturbed (see above)",
                       style="yellow"))
        return
    if not serve:
        return
    print_table(out, serve_table(predictions, serve))
    best = serve[0]
    if best.config is None:
        out.print(Text(_no_config(best, predictions[0].engine)))
        return
    out.print(Text("vLLM --speculative-config", style="bold") + Text(f" ({_checked(best)}):"))
    print_command(out, json.dumps(best.config, separators=(", ", ": ")))
    if best.plan.loses_at:
        out.print(Text(_loses(best.plan, predictions[0].engine), style="yellow"))


def _serve_cell(row, markdown: bool = False) -> str:
    """A table row's cell: the k and its predicted speedup; a 0 as plain decoding where it is that, else priced."""
    speedup = f" ({row.speedup:.2f}×)" if markdown else f" · {row.speedup:.2f}×"
    if row.k:
        return f"k={row.k}{speedup}"
    return ("0" if markdown else "0 · plain") if row.speedup == 1.0 else f"0{speedup}"


def _no_config(item: ServeConfig, engine: str) -> str:
    if not item.plan.k_max:
        return "The best candidate pays at no batch size measured: serve without speculation."
    return (f"The best candidate's table does not pay: on {engine} its batch sizes that draft nothing cost more than "
            "the others gain (see the table): serve without speculation.")


def _loses(plan, engine: str) -> str:
    """Where a served table is predicted slower than serving without speculation, and what to do about it."""
    rows = [plan.row_at(b) for b in plan.loses_at]
    where = ", ".join(f"batch {r.batch_size} ({r.speedup:.2f}×)" for r in rows)
    return (f"On {engine} this config is predicted slower than serving without speculation at {where}: a speculative "
            f"engine that drafts nothing still costs there. Where your server mostly runs {rows[0].batch_size} rows "
            "or more, serve without a speculative config.")


def _checked(item: ServeConfig) -> str:
    if item.validated_by:
        return f"accepted by {item.validated_by}'s own SpeculativeConfig"
    if item.refused:
        return f"vLLM refuses it: {item.refused}"
    note = "costs measured on vocabcheck's decoder; not checked by vLLM (not installed here, or a hub target)"
    if item.plan.method.needs_draft and not item.plan.same_rows:
        note += "; vLLM takes the draft `vocabcheck align` writes (its rows differ from the target's)"
    return note


def _k_document(p: KPrediction) -> dict[str, Any]:
    counts = p.counts
    return {"k": p.k, "acceptance_rate": counts.acceptance_rate, "mean_accepted_length": counts.mean_accepted_length,
            "accepted_tokens": counts.accepted, "drafted_tokens": counts.drafted, "steps": counts.steps,
            "acceptance_by_position": list(counts.acceptance_by_position), "speedup": p.speedup}


def candidate_document(candidate: Candidate, rank: int) -> dict[str, Any]:
    costs = candidate.costs
    return {"rank": rank, "draft": candidate.draft if candidate.method.needs_draft else None,
            "method": candidate.method, "translated": candidate.translated, "refused": candidate.refused,
            "best_k": candidate.best.k if candidate.best else None,
            "cost_ratio": costs.cost_ratio if costs else None,
            "cost_noise": (costs.noise or None) if costs else None,
            "cost_spread": costs.spread if costs else None,
            "draft_step_ms": 1000 * costs.draft_step_s if costs else None,
            "target_step_ms": 1000 * costs.target_step_s if costs else None,
            "verify_cost": {str(k): costs.verify_cost(k) for k in (p.k for p in candidate.greedy)} if costs else {},
            "step_cost": {str(p.k): costs.step_cost(p.k, p.counts.widths) for p in candidate.greedy} if costs else {},
            "step_engine": costs.engine if costs else None,
            "plain_step_ms": 1000 * costs.plain_step_s if costs else None,
            "step_ms": {str(w): 1000 * s for w, s in costs.step_s} if costs else {},
            "idle_step_ms": 1000 * costs.idle_step_s if costs and costs.idle_step_s else None,
            "step_ms_by_k": {str(k): {str(w): 1000 * s for w, s in steps} for k, steps in costs.step_s_by_k}
            if costs else {},
            "per_k": [_k_document(p) for p in candidate.greedy],
            "sampled": [{"temperature": t, "per_k": [_k_document(p) for p in rows]} for t, rows in candidate.sampled]}


def _candidates_document(prediction: Prediction) -> dict[str, Any]:
    ranked = list(enumerate(prediction.candidates, start=1))
    return {"drafts": [candidate_document(c, r) for r, c in ranked if c.method.needs_draft],
            "ngram": next((candidate_document(c, r) for r, c in ranked if c.method is Method.NGRAM), None)}


def serve_document(item: ServeConfig) -> dict[str, Any]:
    plan = item.plan
    return {"draft": plan.draft if plan.method.needs_draft else None, "method": plan.method,
            "same_rows": plan.same_rows,
            "per_batch_size": [{"batch_size": r.batch_size, "k": r.k, "speedup": r.speedup, "spread": r.spread}
                               for r in plan.rows],
            "pays": plan.pays, "loses_at": list(plan.loses_at),
            "speculative_config": item.config, "validated_by": item.validated_by, "refused": item.refused}


def predict_document(predictions: Prediction | Sequence[Prediction], serve: Sequence[ServeConfig] = (), *,
                     command: str) -> dict[str, Any]:
    predictions = _many(predictions)
    prediction = predictions[0]
    return {
        "schema": PREDICT_SCHEMA,
        "vocabcheck_version": __version__,
        "command": command,
        "target": prediction.target,
        "device": prediction.device,
        "dtype": prediction.dtype,
        "engine": prediction.engine,
        "prompts": prediction.prompts,
        "tokens": prediction.tokens,
        "source": prediction.source,
        "batch_size": prediction.batch_size,
        "k_values": list(prediction.k_values),
        "temperatures": list(prediction.temperatures),
        "seconds": prediction.seconds,
        "noise": prediction.noise or None,
        **_candidates_document(prediction),
        "per_batch_size": [{"batch_size": p.batch_size, "noise": p.noise or None, **_candidates_document(p)}
                           for p in predictions],
        "serve_margin": MARGIN,
        "serve": [serve_document(item) for item in serve],
    }


def predict_markdown(predictions: Prediction | Sequence[Prediction], serve: Sequence[ServeConfig] = (), *,
                     command: str) -> str:
    predictions = _many(predictions)
    prediction = predictions[0]
    lines = ["# vocabcheck predict", "", f"- target: `{escape(prediction.target)}`", f"- {_settings(prediction)}",
             f"- command: `{escape(command)}`",
             *([f"- **{escape(noise_line(prediction))}**"] if noise_line(prediction) else []),
             "", "## Ranking (greedy)", "",
             "| rank | candidate | best k | acceptance | mean accepted length | accepted tokens | predicted speedup |",
             "|---|---|---|---|---|---|---|"]
    for rank, candidate in enumerate(prediction.candidates, start=1):
        best = candidate.best
        if best is None:
            lines.append(f"| {rank} | {escape(_name(candidate))} | — | — | — | — | "
                         f"{escape(candidate.refused or 'not predicted')} |")
            continue
        lines.append(f"| {rank} | {escape(_name(candidate))} | {best.k} | {best.counts.acceptance_rate:.1%} | "
                     f"{best.counts.mean_accepted_length:.2f} | {best.counts.accepted:.0f} | "
                     f"{_speedup(best.speedup)} |")
    for temperature in (None, *prediction.temperatures):
        label = "greedy" if temperature is None else f"temperature {temperature:g} (expected)"
        lines += ["", f"## Predicted speedup (mean accepted length) per k, {label}", "",
                  "| candidate | " + " | ".join(f"k={k}" for k in prediction.k_values) + " |",
                  "|---|" + "---|" * len(prediction.k_values)]
        for candidate in prediction.candidates:
            rows = _per_k(candidate, temperature)
            if rows:
                lines.append(f"| {escape(_name(candidate))} | " + " | ".join(_cell(p) for p in rows) + " |")
    lines += _serving_markdown(predictions, serve)
    lines += ["", "![Predicted speedup against k](speedup.png)", ""]
    return document(lines)


def _serving_markdown(predictions: Sequence[Prediction], serve: Sequence[ServeConfig]) -> list[str]:
    if not serve:
        return []
    sizes = sorted(p.batch_size for p in predictions)
    lines = ["", f"## Serve with (k per batch size, predicted speedup; 0: draft nothing, where no k is predicted "
                 f"{MARGIN:.0%} faster than that)", "",
             "| candidate | " + " | ".join(f"batch {b}" for b in sizes) + " | vLLM speculative_config |",
             "|---|" + "---|" * len(sizes) + "---|"]
    for item in serve:
        cells = {r.batch_size: _serve_cell(r, markdown=True) for r in item.plan.rows}
        config = f"`{escape(json.dumps(item.config))}` ({escape(_checked(item))})" if item.config else "none"
        name = item.plan.draft if item.plan.method.needs_draft else "n-gram lookup"
        lines.append(f"| {escape(name)} | " + " | ".join(cells[b] for b in sizes) + f" | {config} |")
    best, engine = serve[0], predictions[0].engine
    if best.config is None and best.plan.k_max:
        lines += ["", escape(_no_config(best, engine))]
    elif best.config is not None and best.plan.loses_at:
        lines += ["", escape(_loses(best.plan, engine))]
    return lines


def check_destination(directory: Path | None) -> None:
    """Refuse a ``--report`` directory that cannot be written, before anything runs (exit code 2)."""
    _check(directory, REPORT_FILES, "the prediction report")


def write_report(directory: Path, predictions: Prediction | Sequence[Prediction], serve: Sequence[ServeConfig] = (),
                 *, command: str) -> list[Path]:
    """predict.md, predict.json and speedup.png, each rendered first, then written atomically."""
    predictions = _many(predictions)
    files = {"predict.md": predict_markdown(predictions, serve, command=command),
             "predict.json": json.dumps(predict_document(predictions, serve, command=command), indent=2) + "\n",
             "speedup.png": _chart(predictions[0])}
    return write_files(Path(directory), files, "the prediction report")


def _chart(prediction: Prediction) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for candidate in prediction.candidates:
        points = [(p.k, p.speedup) for p in candidate.greedy if p.speedup is not None]
        if points:
            axis.plot([k for k, _ in points], [s for _, s in points], marker="o", label=_name(candidate))
    axis.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    axis.set_xlabel("k (tokens proposed per step)")
    axis.set_ylabel("predicted speedup over plain decoding")
    axis.set_title(f"Predicted speedup, greedy ({prediction.device}, batch {prediction.batch_size})")
    if axis.get_legend_handles_labels()[0]:
        axis.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()
