"""`vocabcheck bench`: time per output token with no speculation, n-gram and draft-model speculation, per batch
size, against the ideal speedup and against transformers' own assisted generation.

Every cell runs in one process on the same prompts, interleaved (each repeat visits the cells in a rotated order,
so drift on a shared machine spreads over all of them), after a warm-up; the table reports medians and the spread
(min-max). Greedy output is checked against plain decoding in every cell.

Every sequence generates exactly ``max_new_tokens`` tokens (eos is ignored), as in transformers' rows.

The ideal speedup each row is held against is defined in :mod:`vocabcheck.bench.plan`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..decode.session import Session
from .peer import measure_hf
from .plan import BenchPlan, BenchResult, Cell, Row, alpha_from_length, ideal_speedup

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
              progress: Callable[[str], None] | None = None) -> BenchResult:
    """Measure every (method, batch size) cell; prompts are token ids (cycled to fill the largest batch)."""
    say = progress or (lambda message: None)
    start = time.perf_counter()
    methods = [m for m in plan.methods if m != "draft" or session.draft_model is not None]
    cells = {(m, b): Cell(m, b) for b in plan.batch_sizes for m in methods}
    batches = {b: [list(prompts[i % len(prompts)]) for i in range(b)] for b in plan.batch_sizes}

    def measure(cell: Cell, tokens: int, record: bool) -> bool:
        """Run one cell; False when Ctrl-C stopped it (the partial run is not recorded)."""
        options = replace(plan.options, method=cell.method, max_new_tokens=tokens)
        generation = session.generate_ids(batches[cell.batch_size], options)
        if generation.interrupted:
            return False
        if record:
            cell.runs.append(generation.metrics)
            cell.outputs.append(tuple(s.token_ids for s in generation.sequences))
        return True

    order = list(cells.values())
    schedule = [(cell, min(8, plan.max_new_tokens), False, "warm-up") for _ in range(plan.warmup) for cell in order]
    for repeat in range(plan.repeat):
        shift = repeat % len(order)
        schedule += [(cell, plan.max_new_tokens, True, f"repeat {repeat + 1}/{plan.repeat}")
                     for cell in order[shift:] + order[:shift]]
    interrupted = False
    try:
        for cell, tokens, record, stage in schedule:
            say(f"{stage}: {cell.method}, batch {cell.batch_size}")
            if not measure(cell, tokens, record):
                interrupted = True
                break
    except KeyboardInterrupt:
        interrupted = True
    cells = {key: cell for key, cell in cells.items() if cell.runs}
    methods = [m for m in methods if any(key[0] == m for key in cells)]

    rows = []
    for batch in plan.batch_sizes:
        base = cells.get(("none", batch))
        for method in methods:
            cell = cells.get((method, batch))
            if cell is None:
                continue
            if base is not None and base.outputs and plan.options.sampling.greedy:
                cell.lossless = all(o == base.outputs[0] for o in cell.outputs)
            rows.append(_row(cell, base, plan.k))
    hf_rows, hf_note = (), ""
    if plan.compare_hf and 1 in plan.batch_sizes and not interrupted:
        hf_rows, hf_note = measure_hf(session, batches[1][0], plan, cells, say)
    return BenchResult(plan=plan, rows=tuple(rows), hf_rows=tuple(hf_rows), device=str(session.device),
                       dtype=str(session.dtype).removeprefix("torch."), prompts=len(prompts),
                       seconds=time.perf_counter() - start, hf_note=hf_note, interrupted=interrupted,
                       translated=session.translator is not None and "draft" in methods)


def _row(cell: Cell, base: Cell | None, k: int) -> Row:
    totals = cell.totals
    speculative = cell.method != "none"
    speedup = base.tpot_ms / cell.tpot_ms if base is not None and cell.tpot_ms else None
    row = Row(
        method=cell.method, batch_size=cell.batch_size, tpot_ms=cell.tpot_ms, tpot_spread_ms=cell.tpot_spread,
        tokens_per_s=cell.tokens_per_s,
        acceptance_rate=totals.acceptance_rate if speculative else None,
        mean_accepted_length=totals.mean_accepted_length if speculative else None,
        acceptance_by_position=tuple(totals.acceptance_by_position) if speculative else (),
        speedup=speedup, lossless=cell.lossless,
    )
    if base is None or not speculative:
        return row
    plain_step = base.verify_pass_s
    if not plain_step:
        return row
    verify_cost = cell.verify_pass_s / plain_step
    # n-gram lookup costs no model forward: c = 0 and the ideal is the mean accepted length itself
    cost_ratio = cell.draft_pass_s / plain_step if cell.method == "draft" else 0.0
    length = totals.mean_accepted_length
    ideal = ideal_speedup(length, k, cost_ratio)
    reachable = length / (k * cost_ratio + verify_cost) if verify_cost else None
    return Row(**{**row.__dict__, "ideal_speedup": ideal, "efficiency": speedup / ideal if speedup else None,
                  "alpha": alpha_from_length(length, k), "cost_ratio": cost_ratio, "verify_cost": verify_cost,
                  "engine_efficiency": speedup / reachable if speedup and reachable else None})
