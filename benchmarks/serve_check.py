"""Does `predict --batch-sizes` tell the k to serve with? Its table against a bench of every fixed k, on one pair.

    python -m benchmarks.serve_check TARGET DRAFT --bench reports/bench-auto --out reports/serve
    python -m benchmarks.serve_check TARGET DRAFT --bench B --engine vllm --out reports/serve-vllm   # vLLM's python

With ``--engine vllm`` predict runs with ``--engine vllm`` (its steps timed on vLLM) and the measured cells are the
bench's vLLM rows (``bench --compare-vllm``: a vLLM engine per cell, the speedup vLLM's plain row's TPOT over the
cell's). Those are engines started minutes apart; where the bench served predict's table (``--served``), each cell's
speedup is also taken through the served engine, which ran in the repeats of the plain engine and of each fixed k
(``served_beside``): the *paired* column and checks, in which the machine's drift between two engines cancels.

1. ``vocabcheck predict TARGET DRAFT --prompt-file P -k 1,2,4,8 --batch-sizes 1,4,16 --max-new-tokens 64
   --ignore-eos --json`` on the quiet machine, and once more beside one CPU burner (a process spinning for as long as
   it runs: half of a 2-core machine);
2. a bench already made over the same prompts, batch sizes and k values
   (``vocabcheck bench TARGET DRAFT -k 1,2,4,8 --batch-sizes 1,4,16 --prompts P ... --report B``; made with
   ``--predict``, its cells also carry the prediction made with the bench's own models beside each measurement);
3. per method and batch size: the k predict serves (0: no speculation) against the measured best fixed k and the
   top two; the served k's measured TPOT against the best fixed k's and against no speculation's; and per cell the
   quiet predict's speedup (and the bench's own --predict column, where it has one) against the measured one. The
   rows of issue 35's "done when" are checked as stated.
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
NAMES = {"draft": "draft model", "ngram": "n-gram"}
SERVED_HEADER = ("| method | batch | served k | measured best fixed k (top two) | served / best fixed TPOT | "
                 "served / none TPOT | within 5 % of best | not > 5 % slower than none |",
                 "|---|---|---|---|---|---|---|---|")


def predict_argv(target: str, draft: str, prompts: str, sizes: str, ks: str, engine: str = "vocabcheck"
                 ) -> list[str]:
    return ["predict", target, draft, "--prompt-file", prompts, "-k", ks, "--batch-sizes", sizes,
            "--max-new-tokens", "64", "--ignore-eos", "--json", *(["--engine", engine] if engine != "vocabcheck" else [])]


def measured_rows(bench: dict, engine: str) -> dict[tuple[str, int, int], dict]:
    """(method, batch size, k) → the measured cell (``tpot_ms``, ``speedup`` over plain decoding, ``k``; the bench's
    own --predict column where it has one): vocabcheck's rows, or the bench's vLLM rows (--compare-vllm)."""
    if engine == "vocabcheck":
        return {(r["method"], r["batch_size"], r["k"]): r for r in bench["rows"]}
    rows = {(r["method"], r["batch_size"], r["k"]):
            {"k": r["k"], "tpot_ms": r["vllm"]["tpot_ms"],
             "beside": {b["method"]: b["tpot_ms"] for b in r.get("served_beside", [])}}
            for r in bench["vllm_rows"] if not r.get("served")}  # a served table's engine is not a fixed-k cell
    for (method, batch, k), row in rows.items():
        plain = rows[("none", batch, 0)]
        row["speedup"] = plain["tpot_ms"] / row["tpot_ms"]
        if method != "none" and method in row["beside"] and method in plain["beside"]:
            # the same ratio taken through the served engine, which ran in the repeats of both engines: the plain
            # engine over the served one, times the served one over this k's (a drift of the machine between the
            # two engines' repeats cancels)
            row["paired"] = row["speedup"] * row["beside"][method] / plain["beside"][method]
    return rows


def served_checks(rows: dict, table: dict, batch_sizes: list[int], key: str) -> tuple[list, list[str]]:
    """Per method and batch size, the served k against the best fixed k and plain decoding, by each cell's
    ``key`` speedup over plain decoding (``speedup``, or ``paired`` where the bench has it): the checks and the rows
    of the table."""
    checks, lines = [], []
    for method in ("draft", "ngram"):
        for batch in batch_sizes:
            fixed = sorted((r for (m, b, k), r in rows.items()
                            if m == method and b == batch and isinstance(k, int) and key in r),
                           key=lambda r: -r[key])
            if ("none", batch, 0) not in rows or not fixed or (method, batch) not in table:
                continue
            k = table[(method, batch)]
            served_row = next((r for r in fixed if r["k"] == k), None)
            if k and served_row is None:
                continue
            speedup = served_row[key] if k else 1.0
            best = fixed[0]
            to_best, to_none = max(best[key], 1.0) / speedup, 1.0 / speedup
            top = [r["k"] for r in fixed[:2]]
            checks.append((to_best <= 1.05, to_none <= 1.05))
            lines.append(f"| {NAMES[method]} | {batch} | {k} | {best['k']} ({', '.join(map(str, top))}) | "
                         f"{to_best:.3f} | {to_none:.3f} | {'yes' if to_best <= 1.05 else 'NO'} | "
                         f"{'yes' if to_none <= 1.05 else 'NO'} |")
    return checks, lines


def predict(argv: list[str], burners: int) -> dict:
    done = run_beside(argv, burners)
    if done.returncode != 0:
        raise SystemExit(f"serve_check: predict exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def served(document: dict) -> dict[tuple[str, int], int]:
    """(method, batch size) → the k predict serves it with."""
    return {(plan["method"], row["batch_size"]): row["k"] for plan in document["serve"]
            for row in plan["per_batch_size"]}


def ranking(document: dict) -> dict[int, list[tuple[str, int]]]:
    """Per batch size, the candidates' (method, best k) in rank order."""
    out = {}
    for at in document["per_batch_size"]:
        candidates = [c for c in at["drafts"] + [at["ngram"]] if c]
        out[at["batch_size"]] = [(c["method"], c["best_k"]) for c in sorted(candidates, key=lambda c: c["rank"])]
    return out


def predicted_speedups(document: dict) -> dict[tuple[str, int, int], float]:
    """(method, batch size, k) → predict's greedy speedup for the first draft and for n-gram lookup."""
    out = {}
    for at in document["per_batch_size"]:
        for candidate in [*at["drafts"][:1], at["ngram"]]:
            for row in (candidate or {}).get("per_k", []):
                if row.get("speedup") is not None:
                    out[(candidate["method"], at["batch_size"], row["k"])] = row["speedup"]
    return out


def _served_lines(bench: dict, priced_on: str) -> list[str]:
    """The bench's own measurement of the served table (``bench --served``: on vLLM one engine with the whole
    ``speculative_config``), where the bench was made with it; ``priced_on``: the engine whose steps priced it."""
    rows = bench.get("served") or []
    if not rows:
        return []
    lines = ["## The served table run as served (`bench --served`)", "",
             "On vocabcheck's decoder the served k is that fixed-k cell; on vLLM one engine ran predict's "
             "speculative_config (num_speculative_tokens_per_batch_size) for every batch size. predict priced the "
             f"table with {priced_on}'s steps: on the other engine the rows show that table there, not the one "
             "predict would serve it.", "",
             "| engine | method | batch | served k | served / none | predicted | best fixed k | best / none | "
             "served / best | within 5 % of best | not > 5 % slower than none |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        near, safe = r["of_best"] >= 1 / 1.05, r["speedup"] >= 1 / 1.05
        lines.append(f"| {r['engine']} | {NAMES[r['method']]} | {r['batch_size']} | {r['k']} | {r['speedup']:.2f}× | "
                     f"{r['predicted_speedup']:.2f}× | {r['best_k']} | {r['best_speedup']:.2f}× | {r['of_best']:.3f} "
                     f"| {'yes' if near else 'NO'} | {'yes' if safe else 'NO'} |")
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        lines.append(f"\n- {engine}: within 5 % of the best fixed k in {sum(r['of_best'] >= 1 / 1.05 for r in mine)} "
                     f"of {len(mine)}; never more than 5 % slower than no speculation in "
                     f"{sum(r['speedup'] >= 1 / 1.05 for r in mine)} of {len(mine)}")
    return lines + [""]


def _noise(document: dict) -> str:
    """Per batch size, the first reason predict gave for calling its costs noise ("none" where it gave none)."""
    said = [f"batch {p['batch_size']}: {p['noise'].split('; ')[0]}" for p in document["per_batch_size"] if p["noise"]]
    return "; ".join(said) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--bench", type=Path, required=True, help="a bench report directory (its bench.json)")
    parser.add_argument("--prompts", default="benchmarks/prompts-16.jsonl")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "serve")
    parser.add_argument("--engine", default="vocabcheck", choices=("vocabcheck", "vllm"),
                        help="whose steps predict times and whose cells are measured (vllm: the bench's vLLM rows)")
    parser.add_argument("--no-busy", action="store_true", help="skip the run beside a CPU burner")
    parser.add_argument("--reuse", action="store_true",
                        help="read each prediction OUT/predict-{quiet,busy}.json holds (made by an earlier run with "
                             "the same arguments, or by predict itself) instead of running it again; run the others")
    args = parser.parse_args()
    bench = json.loads((args.bench / "bench.json").read_text())
    sizes = ",".join(str(b) for b in bench["plan"]["batch_sizes"])
    ks = ",".join(str(k) for k in bench["plan"]["ks"] if k != "auto")
    argv = predict_argv(args.target, args.draft, args.prompts, sizes, ks, args.engine)
    names = ("quiet",) if args.no_busy else ("quiet", "busy")
    made = {}
    for name, burners in zip(names, (0, 1)):
        kept = args.out / f"predict-{name}.json"
        if args.reuse and kept.is_file():
            made[name] = json.loads(kept.read_text())
        else:
            print(f"serve_check: predict, {'quiet' if not burners else 'beside one burner'}", file=sys.stderr,
                  flush=True)
            made[name] = predict(argv, burners)
    quiet, busy = made["quiet"], [made["busy"]] if "busy" in made else []
    reused = [name for name in names if args.reuse and (args.out / f"predict-{name}.json").is_file()]
    rows = measured_rows(bench, args.engine)
    table = served(quiet)
    lines = ["# `predict --batch-sizes` against a bench of every fixed k", "",
             f"- command: `python -m benchmarks.serve_check {shlex.join(sys.argv[1:])}`",
             f"- {current().line()}",
             f"- predict: `vocabcheck {shlex.join(argv)}` ("
             + ("quiet only" if args.no_busy else "quiet; then the same beside one CPU burner") + "; "
             + ("read back from " + " and ".join(f"predict-{name}.json" for name in reused) + ", made earlier; "
                "the rest run by this command" if reused else "run by this command") + ")",
             f"- bench: `{bench['command']}` ({args.bench}/bench.md; its header says what ran)"
             + ("; the measured cells are its vLLM rows (vLLM's TPOT; the speedup over vLLM's plain row)"
                if args.engine == "vllm" else ""),
             f"- noise predict said: quiet, {_noise(quiet)}"
             + (f"; beside the burner, {_noise(busy[0])}" if busy else "; no run beside a burner (--no-busy)"), "",
             "## The served k against the measured cells", "", *SERVED_HEADER]
    checks, table_lines = served_checks(rows, table, bench["plan"]["batch_sizes"], "speedup")
    lines += table_lines
    paired_checks, paired_lines = served_checks(rows, table, bench["plan"]["batch_sizes"], "paired")
    if paired_checks:
        lines += ["", "The same, each fixed k's speedup taken through the served engine (`served_beside`: the plain "
                  "engine over the served one in their repeats, times the served one over the k's in theirs):", "",
                  *SERVED_HEADER, *paired_lines]
    lines += ["", "(\"best\" is the fastest of every fixed k and no speculation: a served 0 is measured as no "
              "speculation.)", "", "## Predicted against measured speedup, per cell", "",
              "`predict` is the quiet run above; `bench --predict` is the prediction the bench made beside each "
              "measurement (at the bench's commit).", "",
              "| method | batch | k | predict | bench --predict | measured | predict / measured | "
              "bench --predict / measured | measured, paired | predict / paired |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    errors, bench_errors, paired_errors = [], [], []
    predicted = predicted_speedups(quiet)
    for (method, batch, k), row in sorted(rows.items(), key=lambda item: str(item[0])):
        if method == "none" or not isinstance(k, int) or (method, batch, k) not in predicted:
            continue
        ratio = predicted[(method, batch, k)] / row["speedup"]
        errors.append(abs(ratio - 1))
        in_bench, bench_cells = row.get("predicted_speedup"), ("—", "—")
        if in_bench is not None:
            bench_errors.append(abs(in_bench / row["speedup"] - 1))
            bench_cells = (f"{in_bench:.2f}×", f"{in_bench / row['speedup']:.2f}")
        paired_cells = ("—", "—")
        if "paired" in row:
            paired_errors.append(abs(predicted[(method, batch, k)] / row["paired"] - 1))
            paired_cells = (f"{row['paired']:.2f}×", f"{predicted[(method, batch, k)] / row['paired']:.2f}")
        lines.append(f"| {NAMES[method]} | {batch} | {k} | {predicted[(method, batch, k)]:.2f}× | {bench_cells[0]} | "
                     f"{row['speedup']:.2f}× | {ratio:.2f} | {bench_cells[1]} | {paired_cells[0]} | "
                     f"{paired_cells[1]} |")
    same = bool(busy) and ranking(quiet) == ranking(busy[0])
    noisy = bool(busy) and any(p["noise"] for p in busy[0]["per_batch_size"])
    lines += ["", "## Done when (issue 35), as measured here", "",
              f"- served k within 5 % of the best fixed k: {sum(a for a, _ in checks)} of {len(checks)} cells",
              f"- served k never more than 5 % slower than no speculation: {sum(b for _, b in checks)} of "
              f"{len(checks)} cells",
              f"- predict's speedup within ±15 % of measured: {sum(e <= 0.15 for e in errors)} of {len(errors)} cells "
              f"(largest miss {max(errors, default=0):.0%}); bench --predict's: "
              f"{sum(e <= 0.15 for e in bench_errors)} of {len(bench_errors)}",
              *([f"- the same, each speedup taken through the served engine (paired): served k within 5 % of the "
                 f"best fixed k in {sum(a for a, _ in paired_checks)} of {len(paired_checks)} cells, never more than "
                 f"5 % slower than no speculation in {sum(b for _, b in paired_checks)} of {len(paired_checks)}, "
                 f"predict's speedup within ±15 % in {sum(e <= 0.15 for e in paired_errors)} of "
                 f"{len(paired_errors)} cells (largest miss {max(paired_errors):.0%})"] if paired_errors else []),
              (f"- beside one burner: ranking and best k {'unchanged' if same else 'changed'}; "
               f"predict said {'its figures are too noisy' if noisy else 'nothing of noise'} "
               f"({'never a confident wrong answer' if same or noisy else 'a CONFIDENT WRONG answer'})"
               if busy else "- beside one burner: not run (--no-busy)"), "",
              *_served_lines(bench, quiet.get("engine") or "vocabcheck"),
              "## predict's serving config (quiet)", ""]
    for plan in quiet["serve"]:
        name = NAMES[plan["method"]]
        lines.append(f"- {name}: `{json.dumps(plan['speculative_config'])}`"
                     f"{' (' + plan['validated_by'] + ')' if plan['validated_by'] else ''}")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(args.out / "README.md", "\n".join(lines) + "\n")
    atomic.write_text(args.out / "predict-quiet.json", json.dumps(quiet, indent=2) + "\n")
    if busy:
        atomic.write_text(args.out / "predict-busy.json", json.dumps(busy[0], indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
