"""vLLM's rows beside vocabcheck's (``bench --compare-vllm``): the same cells on the same pair, prompts and
stopping rule, timed as vocabcheck times them, each vLLM cell interleaved with vocabcheck's own run of that cell.

vLLM fixes its speculative config (method, k) and batch size when its engine starts, and starting it takes tens of
seconds, so each vLLM cell starts one engine and runs its repeats back to back; every vLLM repeat is paired with a
repeat of the same cell on vocabcheck's decoder right after it, so the two columns of a row are measured side by
side, under the same load, and the ratio is what the row reports. ``-k auto`` cells have no vLLM row (vLLM has one k
for every row); the note says so.

A served table (``bench --served``, :mod:`vocabcheck.bench.served`) is one engine for every batch size, as vLLM
serves it: ``num_speculative_tokens_per_batch_size`` set, ``max_num_seqs`` the largest batch size. It starts before
the fixed-k cells and runs beside each of them (plain decoding's and its own method's): every repeat of such a cell
runs the served engine at the cell's batch size right after the cell's engine, so the served table is compared with
every fixed k and with plain decoding side by side, not minutes apart (:attr:`EngineRow.served_beside`). After the
cells, each batch size also runs through it paired with vocabcheck's run of the k the table serves there (its own
row).

Every sequence generates exactly ``max_new_tokens`` tokens (eos ignored, as in the other rows). Greedy output is
checked: every vLLM sequence must equal vocabcheck's for the same prompt.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..methods import Method
from .plan import AUTO, BenchPlan


@dataclass(frozen=True)
class EngineRow:
    """One cell on vLLM and on vocabcheck, medians over the paired repeats."""

    method: str
    batch_size: int
    k: int
    vllm_tpot_ms: float
    vocabcheck_tpot_ms: float
    vllm_tokens_per_s: float
    vocabcheck_tokens_per_s: float
    vllm_mean_accepted_length: float
    vocabcheck_mean_accepted_length: float
    repeats: int
    identical: bool | None  # greedy: every vLLM sequence equals vocabcheck's; None when sampling
    served: bool = False  # a served table's engine (bench --served) at this batch size; k is the k it serves there
    # per served table run beside this cell (its method, and its engine's median TPOT at this batch size over the same
    # repeats, each run right after this cell's engine): the served table against this cell side by side
    served_beside: tuple[tuple[str, float], ...] = ()

    @property
    def tpot_ratio(self) -> float:
        """vLLM's TPOT over vocabcheck's, from the paired repeats (below 1: vLLM is faster)."""
        return self.vllm_tpot_ms / self.vocabcheck_tpot_ms if self.vocabcheck_tpot_ms else float("nan")

    def document(self) -> dict[str, Any]:
        return {"method": self.method, "batch_size": self.batch_size, "k": self.k,
                "vllm": {"tpot_ms": self.vllm_tpot_ms, "tokens_per_s": self.vllm_tokens_per_s,
                         "mean_accepted_length": self.vllm_mean_accepted_length},
                "vocabcheck": {"tpot_ms": self.vocabcheck_tpot_ms, "tokens_per_s": self.vocabcheck_tokens_per_s,
                               "mean_accepted_length": self.vocabcheck_mean_accepted_length},
                "tpot_ratio": self.tpot_ratio, "repeats": self.repeats, "identical": self.identical,
                "served": self.served,
                "served_beside": [{"method": method, "tpot_ms": tpot} for method, tpot in self.served_beside]}

    def beside(self, method: str) -> float | None:
        """The TPOT of ``method``'s served table run beside this cell (None where none ran)."""
        return next((tpot for m, tpot in self.served_beside if m == method), None)


def vllm_cells(plan: BenchPlan, methods: Sequence[Method]) -> list[tuple[Method, int, int]]:
    """(method, batch size, k) of every cell vLLM can run: fixed k only."""
    methods = [Method.parse(m) for m in methods]
    return [(m, b, k if m.proposes else 0) for b in plan.batch_sizes for m in methods
            for k in ([k for k in plan.ks if k != AUTO] if m.proposes else (0,))]


def run_vllm_rows(session, prompts: Sequence[Sequence[int]], plan: BenchPlan, methods: Sequence[Method],
                  progress: Callable[[str], None] | None = None) -> tuple[list[EngineRow], str]:
    """Measure every fixed-k cell on vLLM, and each of ``plan.served``'s tables as one engine at every batch size,
    each repeat paired with vocabcheck's (``session``) run of the cell."""
    from ..engines.vllm_worker import EngineProcess, job

    say = progress or (lambda message: None)
    methods = [Method.parse(m) for m in methods]
    request = session.request
    rows, version, device = [], "", ""
    served: list[tuple[Any, str, Any]] = []  # (table, label, engine): started first, run beside the cells
    try:
        for table in plan.served:
            if table.method not in methods:
                continue
            schedule = table.schedule()
            method = table.method if table.k_max else Method.NONE
            label = f"vLLM, {table.method} served table ({_ranges(schedule)})"
            say(f"starting vLLM and warming up: {label}")
            served.append((table, label, EngineProcess(job(
                request.target, request.draft if method.needs_draft else None, method, table.k_max,
                plan.cell_options(method, table.k_max), max(plan.batch_sizes), request.device, request.dtype,
                prompts, schedule=schedule if len(schedule) > 1 else None))))
        for method, batch_size, k in vllm_cells(plan, methods):
            label = f"vLLM {method}, batch {batch_size}" + (f", k={k}" if method.proposes else "")
            say(f"starting vLLM and warming up: {label}")
            engine = EngineProcess(job(request.target, request.draft if method.needs_draft else None, method, k,
                                       plan.cell_options(method, k), batch_size, request.device, request.dtype,
                                       prompts))
            beside = [(t.method, e) for t, _, e in served if method in (t.method, Method.NONE)]
            try:
                version, device = engine.ready["version"], engine.ready["device"]
                rows.append(_paired(engine, session, prompts, plan, method, batch_size, k, label, say, beside))
            finally:
                engine.close()
        for table, label, engine in served:
            version, device = engine.ready["version"], engine.ready["device"]
            for batch_size in plan.batch_sizes:
                k = table.k_at(batch_size)
                row = _paired(engine, session, prompts, plan, table.method if k else Method.NONE, batch_size, k,
                              f"{label}, batch {batch_size}", say)
                rows.append(replace(row, method=table.method, served=True))
    finally:
        for _, _, engine in served:
            engine.close()
    skipped = AUTO in plan.ks and any(m.proposes for m in methods)
    note = (f"vLLM {version} on {device}, one engine process per cell; each vLLM repeat paired with vocabcheck's "
            "run of the same cell right after it; eos ignored"
            + ("; a served table is one engine for every batch size (num_speculative_tokens_per_batch_size, "
               "max_num_seqs the largest batch size), run beside every plain and same-method cell in the same "
               "repeats (right after the cell's engine), then each batch size paired with vocabcheck's run of the "
               "k it serves there" if any(r.served for r in rows) else "")
            + ("; no vLLM row for -k auto (vLLM runs one k for every row)" if skipped else ""))
    return rows, note


def _ranges(schedule) -> str:
    return ", ".join(f"k={k} at batch {start}" + (f"-{end}" if end != start else "") for start, end, k in schedule)


def _paired(engine, session, prompts, plan: BenchPlan, method: Method, batch_size: int, k: int, label: str,
            say, beside: Sequence[tuple[str, Any]] = ()) -> EngineRow:
    """``plan.repeat`` runs of every prompt on ``engine`` in batches of ``batch_size``, each followed by the same on
    every engine ``beside`` it ((served method, engine): a served table's) and by vocabcheck's run of the cell
    (method, batch size, k), after ``plan.warmup`` warm-ups of each: ours, and every vLLM engine's full run at this
    batch size (its start-up ran 8 tokens a prompt; the first full run of a speculative engine at batch 16, with two
    other engines alive, took 24.8 ms a token and the next ones 18.6-19.9); the medians as one row."""
    from .run import _batches, _run_ours

    options = plan.cell_options(method, k if method.proposes else 0)
    batches = _batches(prompts, batch_size)
    for _ in range(plan.warmup):
        _run_ours(session, batches[:1], replace(options, max_new_tokens=min(8, plan.max_new_tokens)))
        for warming in (engine, *(e for _, e in beside)):
            warming.run(plan.max_new_tokens, batch_size)
    theirs, ours = [], []
    served: dict[str, list[dict[str, Any]]] = {m: [] for m, _ in beside}
    for repeat in range(plan.repeat):
        say(f"repeat {repeat + 1}/{plan.repeat}: {label}, "
            + "".join(f"{m}'s served table, " for m in served) + "then vocabcheck's")
        theirs.append(engine.run(plan.max_new_tokens, batch_size))
        for served_method, served_engine in beside:
            served[served_method].append(served_engine.run(plan.max_new_tokens, batch_size))
        run = _run_ours(session, batches, replace(options, max_new_tokens=plan.max_new_tokens))
        if run is None:
            raise KeyboardInterrupt
        ours.append(run)
    identical = None
    if options.sampling.greedy:  # lossless: every engine's sequences, whatever its k, are the target's greedy ones
        identical = all([tuple(ids) for ids in t["token_ids"]] == list(o[1])
                        for runs in (theirs, *served.values()) for t, o in zip(runs, ours))
    return EngineRow(
        method=method, batch_size=batch_size, k=k,
        vllm_tpot_ms=statistics.median(t["tpot_ms"] for t in theirs),
        vocabcheck_tpot_ms=statistics.median(o[0].tpot_ms for o in ours),
        vllm_tokens_per_s=statistics.median(t["tokens_per_s"] for t in theirs),
        vocabcheck_tokens_per_s=statistics.median(o[0].tokens_per_s for o in ours),
        vllm_mean_accepted_length=statistics.median(t["mean_accepted_length"] for t in theirs),
        vocabcheck_mean_accepted_length=statistics.median(o[0].mean_accepted_length for o in ours),
        repeats=plan.repeat, identical=identical,
        served_beside=tuple((m, statistics.median(t["tpot_ms"] for t in runs)) for m, runs in served.items()))
