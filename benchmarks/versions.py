"""The decoder at two revisions, side by side: ``vocabcheck bench`` of a base revision and of this checkout on the
same pair, alternating in one run (base, head, head, base, ...) so that a shared machine's drift falls on both, and
the ratio of their median time per output token per cell.

    python -m benchmarks.versions --base 6d3a4af --rounds 4 --out reports/bench/versions.md -- TARGET DRAFT \\
        --batch-sizes 1,16 -k 4

The base revision is checked out into a temporary git worktree and imported from there (``src/`` where that
revision had one); both run with the same Python and the same installed dependencies.
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
from pathlib import Path

from vocabcheck.provenance import current

ROOT = Path(__file__).resolve().parent.parent


def bench(source: Path, argv: list[str]) -> dict:
    """One ``vocabcheck bench --json`` run with the package imported from ``source``."""
    env = {**os.environ, "PYTHONPATH": str(source), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "vocabcheck", "bench", *argv, "--repeat", "1", "--json"], env=env,
                          capture_output=True, text=True, cwd=source)
    if done.returncode != 0:
        raise SystemExit(f"versions: bench failed at {source}: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare this checkout with")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then vocabcheck bench's arguments")
    args = parser.parse_args()
    argv = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)
        try:
            sources = {"base": base / "src" if (base / "src").is_dir() else base, "head": ROOT}
            runs: dict[str, list[dict]] = {"base": [], "head": []}
            for round_ in range(args.rounds):
                order = ("base", "head") if round_ % 2 == 0 else ("head", "base")
                for name in order:
                    print(f"round {round_ + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
                    runs[name].append(bench(sources[name], argv))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    text = report(runs, args, argv)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


def report(runs: dict[str, list[dict]], args, argv: list[str]) -> str:
    def medians(name: str) -> dict[tuple[str, int, str], float]:
        """Per cell (method, batch size, k; a revision before rows carried k measured its one k)."""
        cells: dict[tuple[str, int, str], list[float]] = {}
        for document in runs[name]:
            for row in document["rows"]:
                k = str(row.get("k", document["plan"].get("k"))) if row["method"] != "none" else "—"
                cells.setdefault((row["method"], row["batch_size"], k), []).append(row["tpot_ms"])
        return {key: statistics.median(values) for key, values in cells.items()}

    base, head = medians("base"), medians("head")
    command = "python -m benchmarks.versions " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = ["# The decoder at two revisions, side by side", "",
             f"- base: `{args.base}`; head: this checkout", f"- command: `{command}`",
             f"- {current().line()}; "
             f"load average {os.getloadavg()[0]:.2f} at the end",
             f"- {args.rounds} rounds, base and head alternating; each run `vocabcheck bench {' '.join(argv)} "
             "--repeat 1`; the figures are medians over the rounds", "",
             "- every cell of head runs every prompt; a base before that change ran the first b prompts at batch b, "
             "so compare such a base's batch-1 rows with care", "",
             "| method | batch | k | base TPOT ms | head TPOT ms | head / base |", "|---|---|---|---|---|---|"]
    for key in sorted(head, key=lambda k: (k[1], ("none", "ngram", "draft").index(k[0]), k[2])):
        if key in base:
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {base[key]:.2f} | {head[key]:.2f} | "
                         f"{head[key] / base[key]:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
