"""`vocabcheck bench`: time per output token with no speculation, n-gram and draft-model speculation, per batch
size and k, against the ideal speedup and against transformers' own assisted generation.

A cell is (method, batch size, k), or one of transformers' variants at batch 1 (:mod:`.peer`). Every cell runs
every prompt of the plan, in batches of its size (the prompts cycled to fill the last batch), and a repeat of a
cell counts only when all of them ran. All cells run in one process, interleaved: each repeat visits every cell,
ours and transformers', in a rotated order, so drift on a shared machine spreads over all of them; a warm-up visit
(one batch, 8 tokens) comes first. The table reports medians over repeats and the spread (min-max). Greedy output
is checked against plain decoding in every cell.

Every sequence generates exactly ``max_new_tokens`` tokens (eos is ignored), in transformers' rows too.

The draft / target split of the time (the cost ratio c and the verification cost) comes from the measured runs
where the engine times its phases for free (the CPU); where it does not (CUDA, where timing a phase costs a device
sync), one separate timing pass per cell after the repeats gives it, and the measured TPOT stays untouched.

The ideal speedup each row is held against is defined in :mod:`vocabcheck.bench.plan`.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..decode.metrics import Metrics
from ..decode.session import Session
from ..interrupts import Terminated, signal_of
from ..machine import BUSY_SHARE, CpuSample
from ..methods import Method
from .peer import PeerRun, PeerVariant, generate_one, one_line, peer_variants
from .plan import (
    AUTO, BenchPlan, BenchResult, Cell, Failure, KValue, Predicted, Row, alpha_from_length, ideal_speedup,
)

# a prediction of a cell, made outside its timed runs (method, batch size, k): its speedup over plain decoding, or
# everything :class:`Predicted` holds; None where there is none
Predict = Callable[[str, int, KValue], "float | Predicted | None"]

# stdlib modules the default prompts come from; none is in the demo pair's training corpus (demo/train.py)
PROMPT_MODULES = ("heapq.py", "bisect.py", "calendar.py", "fractions.py", "statistics.py", "ipaddress.py",
                  "gettext.py", "sched.py", "queue.py", "shlex.py", "fnmatch.py", "glob.py", "colorsys.py",
                  "uuid.py", "zipfile.py", "netrc.py")


def default_prompts(count: int = 32) -> list[str]:
    """Code-completion prompts: a function's first lines from Python's own standard library (held out from the
    demo pair's training text), round-robin over :data:`PROMPT_MODULES`."""
    import sysconfig
    from pathlib import Path

    root = Path(sysconfig.get_paths()["stdlib"])
    per_module: list[list[str]] = []
    for name in PROMPT_MODULES:
        path = root / name
        if not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        snippets = []
        for i, line in enumerate(lines):
            if line.lstrip().startswith("def ") and line.rstrip().endswith(":"):
                body = [line] + [b for b in lines[i + 1:i + 4]]
                snippets.append("\n".join(body) + "\n")
        per_module.append(snippets)
    prompts: list[str] = []
    index = 0
    while len(prompts) < count and any(index < len(s) for s in per_module):
        prompts += [s[index] for s in per_module if index < len(s)]
        index += 1
    return prompts[:count]


def run_bench(session: Session, prompts: Sequence[Sequence[int]], plan: BenchPlan,
              progress: Callable[[str], None] | None = None, predict: Predict | None = None) -> BenchResult:
    """Measure every cell over every prompt (token ids). ``predict``, where given, is asked for each of our cells'
    expected speedup; the rows carry it beside what was measured."""
    say = progress or (lambda message: None)
    start = time.perf_counter()
    methods = [m for m in plan.methods if not m.needs_draft or session.draft_model is not None]
    ours = [Cell(m, b, k) for b in plan.batch_sizes for m in methods for k in (plan.ks if m.proposes else (0,))]
    options = {cell.key: plan.cell_options(cell.method, cell.k) for cell in ours}  # a bad k fails before measuring
    peers: dict[tuple, PeerVariant] = {}
    hf_note, failures = "", []
    if plan.compare_hf and 1 in plan.batch_sizes:
        variants, hf_note, failures = peer_variants(session, plan)
        peers = {(v.method, 1, v.k): v for v in variants}
    order = ours + [Cell(v.method, 1, v.k) for v in peers.values()]
    batches = {b: _batches(prompts, b) for b in plan.batch_sizes}

    def measure(cell: Cell, tokens: int, record: bool, first_only: bool = False) -> bool:
        """Run one cell over every prompt (the first batch only for a warm-up); False when Ctrl-C stopped it.
        A partial run is not recorded; a peer that raises is marked failed."""
        todo = batches[cell.batch_size][:1] if first_only else batches[cell.batch_size]
        before = CpuSample.now()
        if cell.key in peers:
            try:
                run = _run_peer(session, peers[cell.key], todo, plan, tokens)
            except Exception as exc:  # transformers' failure: this cell says why, every other cell stays
                cell.failed, cell.runs[:], cell.outputs[:] = one_line(exc), [], []
                return True
        else:
            run = _run_ours(session, todo, replace(options[cell.key], max_new_tokens=tokens))
        if run is None:
            return False
        if record:
            cell.runs.append(run[0])
            cell.outputs.append(run[1])
            share = CpuSample.now().others_share(before)
            if share is not None:
                cell.others.append(share)
        return True

    schedule = [(cell, min(8, plan.max_new_tokens), False, "warm-up") for _ in range(plan.warmup) for cell in order]
    for repeat in range(plan.repeat):
        shift = repeat % len(order)
        schedule += [(cell, plan.max_new_tokens, True, f"repeat {repeat + 1}/{plan.repeat}")
                     for cell in order[shift:] + order[:shift]]
    interrupted, signum = False, 0
    try:
        for cell, tokens, record, stage in schedule:
            if cell.failed:
                continue
            say(f"{stage}: {_label(cell)}")
            if not measure(cell, tokens, record, first_only=not record):
                interrupted = True
                break
        else:
            _timing_pass(session, ours, batches, options, plan, say)
    except (KeyboardInterrupt, Terminated) as stop:  # Ctrl-C, SIGTERM, SIGHUP: what was measured is reported
        interrupted, signum = True, signal_of(stop)
    repeats_done = min((len(c.runs) for c in order if not c.failed), default=0)
    failures += [Failure(c.method, c.batch_size, c.k, c.failed) for c in order if c.failed]
    rows = _rows(ours, plan, predict)
    hf_rows = _peer_rows([c for c in order[len(ours):] if c.runs], {c.key: c for c in ours},
                         greedy=plan.options.sampling.greedy)
    return BenchResult(plan=plan, rows=tuple(rows), hf_rows=tuple(hf_rows), device=str(session.device),
                       dtype=str(session.dtype).removeprefix("torch."), prompts=len(prompts),
                       seconds=time.perf_counter() - start, hf_note=hf_note, interrupted=interrupted, signum=signum,
                       translated=session.translator is not None and Method.DRAFT in methods, failures=tuple(failures),
                       repeats_done=repeats_done, cells_planned=len(order))


def _label(cell: Cell) -> str:
    k = "" if cell.method in (Method.NONE, "hf-none") else f", k={cell.k}"
    return f"{cell.method}, batch {cell.batch_size}{k}"


def _batches(prompts: Sequence[Sequence[int]], size: int) -> list[list[list[int]]]:
    """Every prompt, in batches of ``size``; the prompts are cycled to fill the last batch (and a batch larger
    than the prompt list), so every batch has the cell's size."""
    count = max(size, -(-len(prompts) // size) * size)
    cycled = [list(prompts[i % len(prompts)]) for i in range(count)]
    return [cycled[i:i + size] for i in range(0, count, size)]


def _run_ours(session: Session, batches, options) -> tuple[Metrics, tuple[tuple[int, ...], ...]] | None:
    """Every batch through the decoder: the merged metrics and every sequence's tokens; None when interrupted."""
    metrics, outputs = None, []
    for batch in batches:
        generation = session.generate_ids(batch, options)
        if generation.interrupted:  # the signal the decoder stopped for goes on to run_bench
            raise KeyboardInterrupt if generation.signum in (0, signal.SIGINT) else Terminated(generation.signum)
        metrics = generation.metrics if metrics is None else metrics.merge(generation.metrics)
        outputs += [s.token_ids for s in generation.sequences]
    return metrics, tuple(outputs)


def _run_peer(session: Session, variant: PeerVariant, batches, plan: BenchPlan,
              tokens: int) -> tuple[PeerRun, tuple[tuple[int, ...], ...]]:
    """Every prompt through transformers (batch 1): TPOT is the mean over prompts, as in our cells' rows."""
    outputs, tpots, wall, generated = [], [], 0.0, 0
    for batch in batches:
        for prompt in batch:
            output, tpot_s, seconds = generate_one(session, variant, prompt, plan, tokens)
            outputs.append(output)
            wall += seconds
            generated += len(output)
            if tpot_s == tpot_s:
                tpots.append(tpot_s)
    tpot_ms = 1000.0 * sum(tpots) / len(tpots) if tpots else 0.0
    return PeerRun(tpot_ms=tpot_ms, tokens_per_s=generated / wall if wall else 0.0), tuple(outputs)


def _timing_pass(session: Session, cells: list[Cell], batches, options, plan: BenchPlan, say) -> None:
    """Where the measured runs carry no phase times (the engine times phases only where it is free), one more run
    of each cell with phases timed, for the cost ratio and the verification cost only."""
    for cell in cells:
        if cell.runs and not cell.runs[0].target_s:
            say(f"timing pass: {_label(cell)}")
            timed = replace(options[cell.key], max_new_tokens=plan.max_new_tokens, time_phases=True)
            run = _run_ours(session, batches[cell.batch_size], timed)
            if run is None:
                raise KeyboardInterrupt
            cell.phase_runs.append(run[0])


def _rows(cells: list[Cell], plan: BenchPlan, predict: Predict | None) -> list[Row]:
    measured = {cell.key: cell for cell in cells if cell.runs}
    rows = []
    for cell in measured.values():
        base = measured.get((Method.NONE, cell.batch_size, 0))
        if base is not None and base.outputs and plan.options.sampling.greedy:
            cell.lossless = all(o == base.outputs[0] for o in cell.outputs)
        row = _row(cell, base)
        if predict is not None and cell.method != Method.NONE:
            row = _predicted(row, predict(cell.method, cell.batch_size, cell.k))
        rows.append(row)
    return rows


def _predicted(row: Row, prediction: float | Predicted | None) -> Row:
    if not isinstance(prediction, Predicted):
        return replace(row, predicted_speedup=prediction)
    return replace(row, predicted_speedup=prediction.speedup, predicted_k=prediction.k,
                   predicted_acceptance_rate=prediction.acceptance_rate,
                   predicted_mean_accepted_length=prediction.mean_accepted_length,
                   predicted_accepted_tokens=prediction.accepted_tokens)


def _peer_rows(cells: list[Cell], ours: dict, *, greedy: bool) -> list[Row]:
    """transformers' rows: speedup against transformers' own plain decoding; greedy output checked against our
    plain decoding at batch 1 (or theirs, where ours did not run)."""
    base = next((c for c in cells if c.method == "hf-none"), None)
    plain = ours.get((Method.NONE, 1, 0))
    reference = plain.outputs[0] if plain is not None and plain.runs else base.outputs[0] if base else None
    rows = []
    for cell in cells:
        checked = greedy and reference is not None
        rows.append(Row(method=cell.method, batch_size=1, tpot_ms=cell.tpot_ms, tpot_spread_ms=cell.tpot_spread,
                        tokens_per_s=cell.tokens_per_s, acceptance_rate=None, mean_accepted_length=None,
                        acceptance_by_position=(), speedup=base.tpot_ms / cell.tpot_ms if base and cell.tpot_ms
                        else None, k=cell.k, prompts=cell.prompts,
                        lossless=all(o == reference for o in cell.outputs) if checked else None,
                        note="TPOT after the first token, as in vocabcheck's rows; eos ignored"))
    return rows


NOISY_SPREAD = 1.25  # a cell's slowest repeat over its fastest, beyond which its median is not a result
ABOVE_IDEAL = 1.02  # an efficiency above the ideal (with rounding room) means the baseline or the cell was disturbed


def _row(cell: Cell, base: Cell | None) -> Row:
    return _noise(_measured_row(cell, base), len(cell.runs), max(cell.others, default=0.0))


def _noise(row: Row, repeats: int, others: float = 0.0) -> Row:
    """The row with the reasons its figures cannot be right, where they cannot: a TPOT that varied beyond
    ``NOISY_SPREAD`` across repeats, other processes using more than ``BUSY_SHARE`` of the machine's CPUs during a
    repeat (:class:`vocabcheck.machine.CpuSample`: what tells a single repeat on a busy machine), or an efficiency
    above the ideal speedup (more than a step can yield)."""
    reasons = []
    low, high = row.tpot_spread_ms
    if repeats >= 2 and low > 0 and high / low > NOISY_SPREAD:
        reasons.append(f"TPOT varied {high / low:.2f}x across repeats")
    if others > BUSY_SHARE:
        reasons.append(f"other processes used {others:.0%} of the CPUs while it ran")
    if row.efficiency is not None and row.efficiency > ABOVE_IDEAL:
        reasons.append(f"speedup {row.efficiency:.2f}x the ideal, more than speculation can give: the machine was "
                       "busy while it or the baseline ran")
    return replace(row, noise="; ".join(reasons)) if reasons else row


def _measured_row(cell: Cell, base: Cell | None) -> Row:
    totals = cell.totals
    speculative = cell.method != Method.NONE
    speedup = base.tpot_ms / cell.tpot_ms if base is not None and cell.tpot_ms else None
    proposed = totals.drafted / totals.steps if speculative and totals.steps else None
    row = Row(
        method=cell.method, batch_size=cell.batch_size, tpot_ms=cell.tpot_ms, tpot_spread_ms=cell.tpot_spread,
        tokens_per_s=cell.tokens_per_s,
        acceptance_rate=totals.acceptance_rate if speculative else None,
        mean_accepted_length=totals.mean_accepted_length if speculative else None,
        acceptance_by_position=tuple(totals.acceptance_by_position) if speculative else (),
        speedup=speedup, lossless=cell.lossless, k=cell.k, prompts=cell.prompts, mean_proposed=proposed,
        accepted_tokens=totals.accepted / len(cell.runs) if speculative else None,
    )
    if base is None or not speculative:
        return row
    plain_step = base.verify_pass_s
    if not plain_step:
        return row
    verify_cost = cell.verify_pass_s / plain_step
    # n-gram lookup costs no model forward: c = 0 and the ideal is the mean accepted length itself
    cost_ratio = cell.draft_pass_s / plain_step if cell.method == Method.DRAFT else 0.0
    length = totals.mean_accepted_length
    k = cell.k if cell.k != AUTO else (proposed or 0.0)  # auto: the proposal length it chose, on average
    ideal = ideal_speedup(length, k, cost_ratio)
    reachable = length / (k * cost_ratio + verify_cost) if verify_cost else None
    return replace(row, ideal_speedup=ideal, efficiency=speedup / ideal if speedup else None,
                   alpha=alpha_from_length(length, k) if cell.k != AUTO else None, cost_ratio=cost_ratio,
                   verify_cost=verify_cost, engine_efficiency=speedup / reachable if speedup and reachable else None)
