"""`vocabcheck bench --repeat 1` beside a CPU burner, and the same bench on the quiet machine: which cells it flags.

    python -m benchmarks.busy_bench TARGET DRAFT --out reports/bench-noise

One burner is a process that spins (``while True: pass``) for as long as the bench runs; on a 2-core machine it takes
half the CPUs. Both benches run as ``vocabcheck bench TARGET DRAFT --methods none,ngram,draft -k 4,auto
--batch-sizes 1,4 --max-new-tokens 24 --warmup 1 --repeat 1 --report OUT/{busy,quiet}`` (a fresh cache directory
each); the summary lists every cell with the noise reason the bench gave it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from benchmarks.burner import run_beside
from vocabcheck import atomic
from vocabcheck.provenance import current

ROOT = Path(__file__).resolve().parent.parent


def bench(target: str, draft: str, out: Path, burners: int) -> tuple[list[str], dict]:
    argv = ["bench", target, draft, "--methods", "none,ngram,draft", "-k", "4,auto", "--batch-sizes", "1,4",
            "--max-new-tokens", "24", "--warmup", "1", "--repeat", "1", "--report", str(out)]
    done = run_beside(argv, burners)
    if done.returncode not in (0, 1):
        raise SystemExit(f"busy_bench: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return argv, json.loads((out / "bench.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-noise")
    parser.add_argument("--burners", type=int, default=1)
    args = parser.parse_args()
    results = {}
    for name, burners in (("busy", args.burners), ("quiet", 0)):
        print(f"busy_bench: {name} ({burners} burner{'s' * (burners != 1)})", file=sys.stderr, flush=True)
        results[name] = bench(args.target, args.draft, args.out / name, burners)
    lines = ["# `bench --repeat 1` beside a CPU burner, and on the quiet machine", "",
             f"- command: `python -m benchmarks.busy_bench {shlex.join(sys.argv[1:])}`",
             f"- {current().line()}",
             f"- each bench: `vocabcheck {shlex.join(results['busy'][0][:-1])} OUT` with OUT `busy/` (beside "
             f"{args.burners} process spinning `while True: pass` for the whole bench) and `quiet/` (nothing beside "
             "it), run one after the other, a fresh cache directory each; the bench's default prompts", "",
             "| cell | busy: TPOT ms | busy: speedup | busy: flagged | quiet: TPOT ms | quiet: speedup | quiet: flagged |",
             "|---|---|---|---|---|---|---|"]
    quiet_rows = {(r["method"], r["batch_size"], str(r["k"])): r for r in results["quiet"][1]["rows"]}
    for row in results["busy"][1]["rows"]:
        key = (row["method"], row["batch_size"], str(row["k"]))
        other = quiet_rows.get(key, {})

        def cells(r):
            speedup = r.get("speedup")
            return (f"{r.get('tpot_ms', 0):.2f}", "—" if speedup is None else f"{speedup:.2f}×",
                    r.get("noise") or "no")
        lines.append(f"| {key[0]} k={key[2]}, batch {key[1]} | " + " | ".join((*cells(row), *cells(other))) + " |")
    flagged = {name: sum(1 for r in result[1]["rows"] if r.get("noise")) for name, result in results.items()}
    lines += ["", f"Flagged: {flagged['busy']} of {len(results['busy'][1]['rows'])} cells beside the burner, "
              f"{flagged['quiet']} of {len(results['quiet'][1]['rows'])} on the quiet machine."]
    atomic.write_text(args.out / "README.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
