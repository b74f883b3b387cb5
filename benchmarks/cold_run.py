"""Cold runs, as a user runs them: ``vocabcheck run`` as a fresh process (the CLI), per method and k, on the bench's
default prompts, alternating so that a shared machine's drift falls on every variant, and the median tokens/s.

    python -m benchmarks.cold_run --out reports/bench-cold.md            # the demo pair, 3 runs each
    python -m benchmarks.cold_run --runs 1 --prompts 2 --batch-sizes 1 --max-new-tokens 8 --no-report   # a check

Each run is ``python -m vocabcheck run TARGET DRAFT --method M -k K --prompt-file F --batch-size B
--max-new-tokens N --json`` in a new process; tokens/s is the JSON's ``metrics.tokens_per_s`` (generated tokens /
generation time, the model load excluded, the first call's warm-up included), and the process's wall time (load
included) is reported beside it. The variants: no speculation, n-gram and draft, each at a fixed k = 4 and at
``-k auto`` where this checkout's CLI accepts it (checked once, by a one-token run). ``run`` stops a sequence at
eos, as a user's run does.

A process keeps what it measured on disk for the next (``decode/cpu/measured.py``: the CPU head's kernel timings,
``head-kernels.json``, and ``-k auto``'s step costs and pooled acceptance per pair, method and batch size,
``step-costs.json``), so a user's first process on a machine measures and later ones start from it. ``--tuning``
says which is measured: ``fresh`` gives every run an empty cache directory (the first process on a machine),
``kept`` one directory for all runs, primed by one unmeasured run of each row (every later process); ``both`` (the
default) measures each row both ways. The runs' cache directory holds only those files: the models are given by
path.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vocabcheck.provenance import current

ROOT = Path(__file__).resolve().parent.parent


def run_once(argv: list[str], cache: Path) -> tuple[float, float, int]:
    """One fresh ``vocabcheck run`` with ``cache`` as its cache directory: (tokens/s of generation, wall seconds of
    the process, tokens generated)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "VOCABCHECK_CACHE": str(cache)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vocabcheck", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cold_run: exit {done.returncode} from vocabcheck {shlex.join(argv)}: "
                         f"{done.stderr.strip()[-600:]}")
    metrics = json.loads(done.stdout)["metrics"]
    return metrics["tokens_per_s"], wall, metrics["generated_tokens"]


def accepts_auto(target: str) -> bool:
    """Whether this checkout's ``run`` takes ``-k auto``: a one-token plain run with it."""
    with tempfile.TemporaryDirectory() as scratch:
        prompts = Path(scratch) / "p.txt"
        prompts.write_text("def f(x):\n")
        done = subprocess.run([sys.executable, "-m", "vocabcheck", "run", target, "--method", "none", "-k", "auto",
                               "--prompt-file", str(prompts), "--max-new-tokens", "1", "--json"],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return done.returncode == 0


def variants(auto: bool, chosen: str | None = None) -> list[tuple[str, str]]:
    """(method, k): plain decoding once, the speculative methods at k = 4 and at auto; or ``chosen``, as
    ``none,draft:auto,ngram:4``."""
    if chosen:
        picked = [(item.partition(":")[0], item.partition(":")[2]) for item in chosen.split(",")]
        return [(method, "" if method == "none" else k or "4") for method, k in picked]
    ks = ["4"] + (["auto"] if auto else [])
    return [("none", "")] + [(method, k) for method in ("ngram", "draft") for k in ks]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16, help="how many of the bench's default prompts")
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-cold.md")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--variants", help="which rows, as none,draft:auto,ngram:4 (default: none, and n-gram and "
                                           "draft at k = 4 and auto)")
    parser.add_argument("--tuning", choices=("kept", "fresh", "both"), default="both",
                        help="the head's kernel timings: kept from an earlier process, fresh per run, or both")
    args = parser.parse_args(argv)
    from vocabcheck.bench import default_prompts

    if args.target is None:
        from vocabcheck.demo.pair import demo_pair

        pair = demo_pair()
        args.target, args.draft = str(pair.target), str(pair.draft)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    auto = accepts_auto(args.target)
    with tempfile.TemporaryDirectory() as scratch:
        prompt_file = Path(scratch) / "bench-prompts.jsonl"
        prompt_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in default_prompts(args.prompts)))
        cells: dict[tuple[str, int, str, str], list[tuple[float, float, int]]] = {}
        commands: dict[tuple[str, int, str, str], list[str]] = {}
        tunings = ("kept", "fresh") if args.tuning == "both" else (args.tuning,)
        order = [(t, b, m, k) for t in tunings for b in sizes for m, k in variants(auto, args.variants)]
        kept = Path(scratch) / "kept-cache"

        def command_for(batch, method, k):
            return ["run", args.target, *([args.draft] if method == "draft" else []), "--method", method,
                    *(["-k", k] if k else []), "--prompt-file", str(prompt_file), "--batch-size", str(batch),
                    "--max-new-tokens", str(args.max_new_tokens), "--json"]

        if "kept" in tunings:
            for tuning, batch, method, k in order:
                if tuning == "kept":
                    print(f"priming: batch {batch}, {method} {k}".rstrip(), file=sys.stderr, flush=True)
                    run_once(command_for(batch, method, k), kept)
        for run in range(args.runs):
            turn = order if run % 2 == 0 else order[::-1]  # alternating: drift falls on every variant
            for tuning, batch, method, k in turn:
                command = command_for(batch, method, k)
                print(f"run {run + 1}/{args.runs}: {tuning}, batch {batch}, {method} {k}".rstrip(), file=sys.stderr,
                      flush=True)
                cache = kept if tuning == "kept" else Path(tempfile.mkdtemp(dir=scratch, prefix="fresh-"))
                cells.setdefault((tuning, batch, method, k), []).append(run_once(command, cache))
                commands[(tuning, batch, method, k)] = command
    text = report(cells, commands, args, auto, prompt_file.name)
    if not args.no_report:
        from vocabcheck import atomic

        atomic.write_text(args.out, text)
    print(text)
    return 0


def report(cells, commands, args, auto: bool, prompt_name: str) -> str:
    command = "python -m benchmarks.cold_run " + shlex.join(sys.argv[1:])
    example = next(iter(commands.values()))
    lines = ["# Cold runs: `vocabcheck run` as a fresh process", "",
             f"- command: `{command}`",
             f"- each run: `python -m vocabcheck {shlex.join(example)}` (method, draft and `-k` per row; the prompt "
             f"file holds the bench's first {args.prompts} default prompts, one JSON object per line)",
             f"- {current().line()}; load "
             f"average {os.getloadavg()[0]:.2f} at the end (a shared machine: compare rows, not runs)",
             f"- {args.runs} runs per row, rows alternating (forward, then backward); medians",
             f"- `-k auto`: {'accepted by this checkout and measured' if auto else 'not accepted by this checkout'}",
             "- tokens/s: the run's own `metrics.tokens_per_s` (generation only, first call's warm-up included); "
             "wall: the whole process, model load included",
             "- kept state: `kept` runs find what earlier processes left in the cache directory (the CPU head's kernel "
             "timings and, where this checkout keeps them, `-k auto`'s step costs; one unmeasured priming run per row, "
             "then every measured run adds to it); `fresh` runs start from an empty cache directory, as the first "
             "process on a machine does", "",
             "| kept state | batch | method | k | tokens/s (median, min–max) | vs none | wall s (median) "
             "| tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for (tuning, batch, method, k), runs in cells.items():
        speeds = [r[0] for r in runs]
        base = statistics.median(r[0] for r in cells[(tuning, batch, "none", "")])
        median = statistics.median(speeds)
        lines.append(f"| {tuning} | {batch} | {method} | {k or '—'} | {median:.1f} "
                     f"({min(speeds):.1f}–{max(speeds):.1f}) | "
                     f"{median / base:.2f}× | {statistics.median(r[1] for r in runs):.1f} | "
                     f"{statistics.median(r[2] for r in runs):.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
