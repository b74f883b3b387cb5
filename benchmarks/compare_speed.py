"""How long `vocabcheck compare` takes on a Qwen2.5-sized pair, against merely loading both tokenizer.json files with
the `tokenizers` library, measured side by side in one run (interleaved repeats, medians).

    python -m benchmarks.compare_speed [--repeat 7] [--out reports/compare-speed.md]

Three pairs, all with the real Qwen2.5 tokenizer (151,643 ranks + 22 added tokens, rebuilt from qwen.tiktoken) and
Qwen2.5-shaped checkpoints (152,064 rows untied in 3 shards / 151,936 rows tied; tiny hidden size: only the
safetensors headers are read):

- "as shipped": both tokenizer.json files byte-identical, as in the Qwen2.5 repositories;
- "pipeline differs": the draft's tokenizer.json without the NFC normalizer (same vocabulary), so the tokenizers
  differ, the probe runs and both tokenizers are built;
- "other tokenizer": the draft carries the Qwen3.6 tokenizer (248,077 ids): incompatible, and `compare` also computes
  the token-level intersection a translated draft would use (131,586 shared tokens).

Each measurement is one fresh Python process, so imports and file reads are counted as a user sees them:
"load" = `import tokenizers` + `Tokenizer.from_file` on both files; "compare" = `vocabcheck compare T D --json`
through the CLI's main(). One untimed run of each comes first (file cache, bytecode); the processes may write
bytecode caches, as an installed package has them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vocabcheck.provenance import current

ROOT = Path(__file__).resolve().parent.parent  # run from here (``python -m``): this checkout's vocabcheck and tests

LOAD = "import sys, tokenizers\nfor p in sys.argv[1:]: tokenizers.Tokenizer.from_file(p)\n"
COMPARE = "import sys\nfrom vocabcheck.cli import main\nmain(['compare', *sys.argv[1:], '--json'])\n"


def build(root: Path) -> dict[str, tuple[Path, Path]]:
    from vocabcheck.demo.qwen import qwen36_tokenizer_json as qwen3_tokenizer_json
    from vocabcheck.demo import qwen
    from vocabcheck.demo.checkpoint import ModelShape, write_model

    tokenizer = qwen.cached_tokenizer_json(root / "tokenizers")
    text = tokenizer.read_text(encoding="utf-8")
    document = json.loads(text)
    document["normalizer"] = None
    no_nfc = root / "tokenizers" / "qwen2.5-no-nfc.json"
    if not no_nfc.exists():
        no_nfc.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    qwen3 = root / "tokenizers" / "qwen3.6.json"
    if not qwen3.exists():
        qwen3.write_text(qwen3_tokenizer_json(), encoding="utf-8")

    def model(name, rows, tied, shard, tok):
        path = root / name
        if not path.is_dir():
            write_model(path, ModelShape(rows=rows, hidden=8, layers=1, heads=2, kv_heads=1, intermediate=16,
                                         tied=tied, shard_bytes=shard), tokenizer_json=tok,
                        tokenizer_config=qwen.tokenizer_config(), generation_config=qwen.generation_config())
        return path

    target = model("target", qwen.ROWS_LARGE, False, 4_000_000, tokenizer)
    return {
        "as shipped": (target, model("draft", qwen.ROWS_SMALL, True, None, tokenizer)),
        "pipeline differs": (target, model("draft-no-nfc", qwen.ROWS_SMALL, True, None, no_nfc)),
        "other tokenizer": (target, model("draft-qwen3", 248320, True, None, qwen3)),
    }


def timed(code: str, args: list[str]) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode; a checkout gets it on run one
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--root", type=Path, default=Path.home() / ".cache" / "vocabcheck" / "benchmarks" / "compare")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    pairs = build(args.root)
    load_before = os.getloadavg()[0]
    times: dict[tuple[str, str], list[float]] = {}
    for target, draft in pairs.values():  # untimed: file cache and bytecode
        timed(LOAD, [str(target / "tokenizer.json"), str(draft / "tokenizer.json")])
        timed(COMPARE, [str(target), str(draft)])
    for repeat in range(args.repeat):
        for name, (target, draft) in pairs.items():
            files = [str(target / "tokenizer.json"), str(draft / "tokenizer.json")]
            jobs = [("load", LOAD, files), ("compare", COMPARE, [str(target), str(draft)])]
            for kind, code, argv in (jobs if repeat % 2 == 0 else jobs[::-1]):
                times.setdefault((name, kind), []).append(timed(code, argv))
    lines = ["# compare speed", "",
             machine_line(load_before),
             f"- command: `python -m benchmarks.compare_speed --repeat {args.repeat}`",
             "- each figure: median wall time of a fresh process (imports included), repeats interleaved", "",
             "| pair | load both tokenizer.json (s) | vocabcheck compare (s) | ratio |", "|---|---|---|---|"]
    for name in pairs:
        load = statistics.median(times[(name, "load")])
        compare = statistics.median(times[(name, "compare")])
        lines.append(f"| {name} | {load:.2f} | {compare:.2f} | {compare / load:.2f}× |")
    publish(lines, args.out)


def machine_line(load_before: float) -> str:
    """The report's machine line: the commit, the date, what ran, and the load average around the run (``load_before``: at its start)."""
    load_after = os.getloadavg()[0]
    return (f"- {current().line()}, "
            f"load average {load_before:.2f} at the start and {load_after:.2f} at the end"
            + (" (the machine was shared with other jobs: read the ratios, measured side by side, not the seconds)"
               if max(load_before, load_after) > 1.5 else ""))


def publish(lines: list[str], out: Path | None) -> None:
    """Print the report, and write it to ``out`` where one is given."""
    report = "\n".join(lines) + "\n"
    print(report)
    if out:
        out.write_text(report)


if __name__ == "__main__":
    main()
