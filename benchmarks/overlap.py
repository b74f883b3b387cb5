"""Would `compare` get faster by building the two tokenizers while it reads the two tokenizer.json files into
profiles? The two jobs, alone and overlapped, on the Qwen2.5 / Qwen3.6 pair of ``benchmarks.compare_speed``:

    python -m benchmarks.overlap [--repeat 7] [--out reports/compare-overlap.md]

- "one after the other": ``json.loads`` of both files (the profiles' largest part), then ``Tokenizer.from_str`` of
  both (what the probe needs);
- "thread": ``from_str`` of both in a second thread (it releases the GIL) while the main thread parses both files;
- "process": a second Python process (started with ``-c``, importing only ``tokenizers``) builds both from the files
  while the main process parses them: the wall time from its start until both are done.

Each measurement runs in a fresh Python process with its imports done and the files read before the clock starts;
the variants are interleaved and each figure is the median. The wall time of each job inside the overlap is reported
too, so a slowdown of either side shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.compare_speed import build, machine_line, publish

ONE = r"""
import gc, json, sys, threading, time, subprocess
from tokenizers import Tokenizer
variant, a_path, b_path = sys.argv[1:4]
texts = [open(p, encoding="utf-8").read() for p in (a_path, b_path)]
gc.disable()  # as compare runs
times = {}
def parse():
    t = time.perf_counter()
    for text in texts:
        json.loads(text)
    times["parse"] = time.perf_counter() - t
def build():
    t = time.perf_counter()
    for text in texts:
        Tokenizer.from_str(text)
    times["build"] = time.perf_counter() - t
start = time.perf_counter()
if variant == "sequential":
    parse(); build()
elif variant == "thread":
    worker = threading.Thread(target=build); worker.start(); parse(); worker.join()
else:
    code = "import sys\nfrom tokenizers import Tokenizer\nfor p in sys.argv[1:]: Tokenizer.from_file(p)\n"
    child = subprocess.Popen([sys.executable, "-c", code, a_path, b_path])
    parse()
    t = time.perf_counter(); child.wait(); times["wait"] = time.perf_counter() - t
times["wall"] = time.perf_counter() - start
print(json.dumps(times))
"""

VARIANTS = ("sequential", "thread", "process")


def measure(variant: str, a: Path, b: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", ONE, variant, str(a), str(b)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--root", type=Path, default=Path.home() / ".cache" / "vocabcheck" / "benchmarks" / "compare")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    target, draft = build(args.root)["other tokenizer"]
    a, b = target / "tokenizer.json", draft / "tokenizer.json"
    load_before = os.getloadavg()[0]
    for variant in VARIANTS:  # untimed: file cache
        measure(variant, a, b)
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for repeat in range(args.repeat):
        for variant in (VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]):
            runs[variant].append(measure(variant, a, b))

    def median(variant: str, key: str) -> str:
        values = [run[key] for run in runs[variant] if key in run]
        return f"{statistics.median(values):.2f}" if values else "–"

    base = statistics.median(run["wall"] for run in runs["sequential"])
    lines = ["# building the tokenizers while the files are parsed", "",
             machine_line(load_before),
             f"- command: `python -m benchmarks.overlap --repeat {args.repeat}`",
             "- pair: the Qwen2.5 and Qwen3.6 tokenizer.json files of `benchmarks.compare_speed` (\"other tokenizer\")",
             "- each figure: median seconds over fresh processes, imports and file reads outside the clock; "
             "variants interleaved", "",
             "| variant | wall (s) | parse both (s) | build both (s) | wait for the child (s) | wall against one after "
             "the other |", "|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        wall = statistics.median(run["wall"] for run in runs[variant])
        lines.append(f"| {variant} | {wall:.2f} | {median(variant, 'parse')} | {median(variant, 'build')} | "
                     f"{median(variant, 'wait')} | {wall / base:.2f}× |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
