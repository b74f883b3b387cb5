"""`predict` against `bench`: the time `vocabcheck predict` needs for 3 drafts × k ∈ {1, 2, 4, 8} on the demo pair,
side by side in one run with the time `bench` needs to measure the same cells, and the predicted accepted tokens per
cell against the ones `bench` measured.

- predict: one call (:func:`vocabcheck.predict.predictor.predict`) for the 3 drafts, n-gram lookup off, greedy, batch
  size 1, the target loaded once and each draft in turn, model loading included.
- bench: :func:`vocabcheck.bench.run_bench` — what `vocabcheck bench TARGET DRAFT --methods none,draft -k 1,2,4,8
  --batch-sizes 1 --max-new-tokens N` runs (a warm-up visit of every cell, then ``--repeat`` interleaved repeats of
  every cell over every prompt) — once per draft on the same prompts; plain decoding (the speedup's baseline) is
  measured with the first draft only, so the bench side holds the 12 draft cells and one plain cell. Its time is the
  sum of the three `run_bench` calls (model loading excluded; the loading is reported beside it).

The criterion (issue #22): predict takes at most a fifth of bench's time.

The drafts: the demo's trained draft and two copies of it with seeded noise on every weight (0.05 and 0.2 of each
tensor's standard deviation), written once next to the demo pair.

    python -m benchmarks.predict_speed --prompts 32 --tokens 64 --out reports/predict/speed.md
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from benchmarks.compare_speed import machine_line, publish

NOISE = {"noisy-0.05": (0.05, 11), "noisy-0.2": (0.2, 12)}


def noisy_draft(source: Path, name: str) -> Path:
    """The demo draft with seeded noise on every weight, written once beside it."""
    import torch
    from transformers import AutoModelForCausalLM

    from vocabcheck.demo.checkpoint import write_model
    from vocabcheck.demo.pair import DRAFT_SHAPE
    from vocabcheck.demo import qwen

    out = source.parent / f"predict-draft-{name}"
    if out.is_dir():
        return out
    noise, seed = NOISE[name]
    state = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).state_dict()
    generator = torch.Generator().manual_seed(seed)
    state = {key: value + noise * value.std() * torch.randn(value.shape, generator=generator)
             for key, value in state.items() if key != "lm_head.weight" or not DRAFT_SHAPE.tied}
    write_model(out, DRAFT_SHAPE, tokenizer_json=source / "tokenizer.json", tokenizer_config=qwen.tokenizer_config(),
                generation_config=qwen.generation_config(), state_dict=state)
    return out


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("-k", default="1,2,4,8")
    parser.add_argument("--warmup", type=int, default=1, help="bench's warm-up visits (bench's default: 1)")
    parser.add_argument("--repeat", type=int, default=3, help="bench's repeats (bench's default: 3)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from vocabcheck.bench import BenchPlan, default_prompts, run_bench
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.decode.session import RunRequest, start_session
    from vocabcheck.demo.pair import demo_pair
    from vocabcheck.predict.predictor import PredictRequest, predict

    load_before = os.getloadavg()[0]
    pair = demo_pair()
    drafts = {"demo draft": pair.draft, **{name: noisy_draft(pair.draft, name) for name in NOISE}}
    k_values = tuple(int(k) for k in args.k.split(","))
    prompts = [Prompt(text) for text in default_prompts(args.prompts)]
    options = DecodeOptions(method="none", max_new_tokens=args.tokens, ignore_eos=True)

    say("predicting")
    start = time.perf_counter()
    prediction = predict(PredictRequest(target=str(pair.target), drafts=tuple(str(d) for d in drafts.values()),
                                        k_values=k_values, options=options, ngram=False), prompts, progress=say)
    predict_s = time.perf_counter() - start

    rows, bench_s, load_s, plain_tpot = {}, 0.0, 0.0, None
    for index, (name, draft) in enumerate(drafts.items()):
        methods = ("none", "draft") if index == 0 else ("draft",)
        begin = time.perf_counter()
        session = start_session(RunRequest(target=str(pair.target), draft=str(draft), methods=methods))
        load_s += time.perf_counter() - begin
        plan = BenchPlan(batch_sizes=(1,), methods=methods, options=options, ks=k_values, warmup=args.warmup,
                         repeat=args.repeat)
        result = run_bench(session, session.encode(prompts, chat=False), plan,
                           progress=lambda stage, n=name: say(f"bench {n}: {stage}"))
        bench_s += result.seconds
        plain_tpot = plain_tpot or result.row("none", 1).tpot_ms
        rows.update({(str(draft), k): result.row("draft", 1, k) for k in k_values})
        del session

    command = "python -m benchmarks.predict_speed " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    verdict = "met" if predict_s <= bench_s / 5 else "NOT met"
    lines = ["# predict: speed and exactness against bench", "", machine_line(load_before),
             f"- command: `{command}`",
             f"- demo pair, {args.prompts} prompts (bench's default prompts) × {args.tokens} new tokens (eos "
             f"ignored), greedy, batch 1, k ∈ {{{', '.join(map(str, k_values))}}}, 3 drafts "
             f"({', '.join(drafts)}), one process, predict first, then bench",
             "- predict: one call for the 3 drafts (n-gram lookup off), model loading included",
             f"- bench: `run_bench` per draft, as `vocabcheck bench TARGET DRAFT --methods none,draft -k "
             f"{args.k} --batch-sizes 1 --max-new-tokens {args.tokens} --warmup {args.warmup} --repeat "
             f"{args.repeat}` runs it (warm-up visit of every cell, then interleaved repeats over every prompt); "
             "plain decoding measured with the first draft only: 12 draft cells and 1 plain cell; model loading "
             "not counted",
             "", "| | seconds | ratio |", "|---|---|---|",
             f"| predict (3 drafts × {len(k_values)} k, one call, model loading included) | {predict_s:.1f} "
             "| 1.00× |",
             f"| bench measuring the same cells (model loading excluded) | {bench_s:.1f} | "
             f"{bench_s / predict_s:.2f}× |",
             f"| bench's model loading (3 × target and draft), not counted above | {load_s:.1f} | |", "",
             f"Criterion (predict ≤ a fifth of bench's time): **{verdict}** ({predict_s / bench_s:.3f} of it).", "",
             "## Predicted against measured, per cell", "",
             "| draft | k | accepted tokens predicted | measured | mean accepted length predicted | measured | "
             "speedup predicted | measured (bench: plain TPOT / this cell's TPOT, medians) |",
             "|---|---|---|---|---|---|---|---|"]
    names = {str(d): n for n, d in drafts.items()}
    exact = 0
    for candidate in prediction.candidates:
        for p in candidate.greedy:
            row = rows[(candidate.draft, p.k)]
            exact += p.counts.accepted == row.accepted_tokens
            measured_speedup = plain_tpot / row.tpot_ms if plain_tpot and row.tpot_ms else float("nan")
            lines.append(f"| {names[candidate.draft]} | {p.k} | {p.counts.accepted:.0f} | {row.accepted_tokens:.0f} "
                         f"| {p.counts.mean_accepted_length:.3f} | {row.mean_accepted_length:.3f} | "
                         f"{p.speedup:.2f}× | {measured_speedup:.2f}× |")
    cells = len(drafts) * len(k_values)
    lines += ["", f"{exact} of {cells} cells: predicted accepted tokens equal to the measured ones exactly.",
              f"Ranking predicted: {', '.join(names[c.draft] + f' (k={c.best.k})' for c in prediction.candidates)}."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
