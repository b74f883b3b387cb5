"""What keeping freed memory in glibc's heap (:mod:`vocabcheck.decode.cpu.memory`) does to a cold ``vocabcheck run``: the
same runs with the allocator left alone (``VOCABCHECK_KEEP_FREED_MEMORY=0``) and as shipped, alternating.

    python -m benchmarks.freed_memory --out reports/freed-memory.md          # the demo pair, 3 runs each
    python -m benchmarks.freed_memory --runs 1 --prompts 2 --no-report        # a check

Each run is a fresh ``python -m vocabcheck run`` (``benchmarks/cold_run.py``'s ``run_once``) over the bench's first
``--prompts`` default prompts; one cache directory serves every run (primed by one unmeasured run of each row), so
that the CPU head's kernel choices and ``-k auto``'s costs are the same for both allocator settings. The figure is the
run's own tokens/s (generation only), median of the runs, and its ratio to no speculation with the same setting.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import tempfile
from pathlib import Path

from vocabcheck.provenance import current

from .cold_run import ROOT, run_once

ROWS = (("none", None), ("ngram", "4"), ("ngram", "auto"), ("draft", "4"), ("draft", "auto"))
SETTINGS = {"allocator left alone": "0", "as shipped": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", default="reports/freed-memory.md")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()

    from vocabcheck.bench import default_prompts
    from vocabcheck.demo.pair import demo_pair

    pair = demo_pair()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        prompt_file = Path(scratch) / "bench-prompts.jsonl"
        prompt_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in default_prompts(args.prompts)))
        cache = Path(scratch) / "cache"

        def argv(batch: int, method: str, k: str | None) -> list[str]:
            return ["run", str(pair.target), *([str(pair.draft)] if method == "draft" else []), "--method", method,
                    *(["-k", k] if k else []), "--prompt-file", str(prompt_file), "--batch-size", str(batch),
                    "--max-new-tokens", str(args.max_new_tokens), "--json"]

        def once(setting: str, batch: int, method: str, k: str | None) -> float:
            os.environ["VOCABCHECK_KEEP_FREED_MEMORY"] = SETTINGS[setting]
            try:
                return run_once(argv(batch, method, k), cache)[0]
            finally:
                del os.environ["VOCABCHECK_KEEP_FREED_MEMORY"]

        plan = [(s, b, m, k) for b in batches for m, k in ROWS for s in SETTINGS]
        for cell in plan:  # priming: the kernel choices and auto's costs, unmeasured
            once(*cell)
        rates: dict[tuple, list[float]] = {cell: [] for cell in plan}
        for repeat in range(args.runs):
            for cell in (plan if repeat % 2 == 0 else reversed(plan)):
                print(f"run {repeat + 1}/{args.runs}: {cell}", flush=True)
                rates[cell].append(once(*cell))
    text = report(rates, args, argv(batches[0], "draft", "auto"))
    print(text)
    if not args.no_report:
        out = ROOT / args.out
        out.write_text(text)


def report(rates: dict[tuple, list[float]], args, example: list[str]) -> str:
    lines = ["# Keeping freed memory in the heap: cold runs with and without", "",
             f"- command: `python -m benchmarks.freed_memory --runs {args.runs} --prompts {args.prompts} "
             f"--batch-sizes {args.batch_sizes} --max-new-tokens {args.max_new_tokens} --out {args.out}`",
             f"- each run: `python -m vocabcheck {shlex.join(example)}` (method, draft, `-k` and batch per row), "
             "with `VOCABCHECK_KEEP_FREED_MEMORY=0` (the allocator left alone) or unset (as shipped); the prompt file "
             f"holds the bench's first {args.prompts} default prompts",
             f"- {current().line()}",
             f"- {args.runs} runs per row, rows alternating (forward, then backward) after one unmeasured priming run "
             "each; one cache directory for all, so both settings find the same kernel choices and `-k auto` costs",
             "- tokens/s: the run's own `metrics.tokens_per_s` (generation only); median (min–max)", "",
             "| batch | method | k | allocator left alone | vs none | as shipped | vs none | shipped / left alone |",
             "|---|---|---|---|---|---|---|---|"]
    medians = {cell: statistics.median(values) for cell, values in rates.items()}
    batches = sorted({cell[1] for cell in rates})
    for batch in batches:
        for method, k in ROWS:
            left, kept = (("allocator left alone", batch, method, k), ("as shipped", batch, method, k))
            cells = []
            for cell in (left, kept):
                none = medians[(cell[0], batch, "none", None)]
                values = rates[cell]
                cells.append(f"{medians[cell]:.1f} ({min(values):.1f}–{max(values):.1f}) | "
                             f"{medians[cell] / none:.2f}×")
            lines.append(f"| {batch} | {method} | {k or '—'} | {cells[0]} | {cells[1]} | "
                         f"{medians[kept] / medians[left]:.2f}× |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
