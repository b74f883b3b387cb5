"""`predict` against measuring: the time `vocabcheck predict` needs for 3 drafts × k ∈ {1, 2, 4, 8} on the demo pair,
side by side with the time the same cells take to measure by running the decoder (what `bench` does for each cell,
counted here as ONE greedy run per cell plus one plain-decoding run: `bench` itself adds a warm-up and repeats, so
this is a lower bound of its time), and the predicted accepted tokens per cell against the measured ones.

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
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from vocabcheck.bench.run import default_prompts
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.loading import Prompt
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

    start = time.perf_counter()
    measured, plain_s = {}, 0.0
    for name, draft in drafts.items():
        session = start_session(RunRequest(target=str(pair.target), draft=str(draft), methods=("draft", "none")))
        if not plain_s:
            begin = time.perf_counter()
            session.generate(prompts, DecodeOptions(method="none", max_new_tokens=args.tokens, ignore_eos=True))
            plain_s = time.perf_counter() - begin
        for k in k_values:
            begin = time.perf_counter()
            run = session.generate(prompts, DecodeOptions(method="draft", k=k, max_new_tokens=args.tokens,
                                                          ignore_eos=True))
            measured[(str(draft), k)] = (run.metrics, time.perf_counter() - begin)
            say(f"measured {name}, k={k}")
    measure_s = time.perf_counter() - start

    command = "python -m benchmarks.predict_speed " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = ["# predict: speed and exactness against measuring", "", machine_line(load_before),
             f"- command: `{command}`",
             f"- demo pair, {args.prompts} prompts (bench's default prompts) × {args.tokens} new tokens (eos "
             f"ignored), greedy, batch 1, k ∈ {{{', '.join(map(str, k_values))}}}, 3 drafts "
             f"({', '.join(drafts)})",
             "- measuring = one greedy run per (draft, k) cell plus one plain-decoding run, models loaded once per "
             "draft; `bench` adds a warm-up and 3 repeats per cell, so its real time is several times this",
             "", "| | seconds | ratio |", "|---|---|---|",
             f"| predict (3 drafts × {len(k_values)} k, one call, model loading included) | {predict_s:.1f} "
             "| 1.00× |",
             f"| measuring the same cells | {measure_s:.1f} | {measure_s / predict_s:.2f}× |", "",
             "## Predicted against measured, per cell", "",
             "| draft | k | accepted tokens predicted | measured | mean accepted length predicted | measured | "
             "speedup predicted | measured (one run, TPOT-free: plain time / this cell's time) |",
             "|---|---|---|---|---|---|---|---|"]
    names = {str(d): n for n, d in drafts.items()}
    exact = 0
    for candidate in prediction.candidates:
        for p in candidate.greedy:
            metrics, seconds = measured[(candidate.draft, p.k)]
            exact += p.counts.accepted == metrics.accepted
            lines.append(f"| {names[candidate.draft]} | {p.k} | {p.counts.accepted:.0f} | {metrics.accepted} | "
                         f"{p.counts.mean_accepted_length:.3f} | {metrics.mean_accepted_length:.3f} | "
                         f"{p.speedup:.2f}× | {plain_s / seconds:.2f}× |")
    cells = len(drafts) * len(k_values)
    lines += ["", f"{exact} of {cells} cells: predicted accepted tokens equal to the measured ones exactly.",
              f"Ranking predicted: {', '.join(names[c.draft] + f' (k={c.best.k})' for c in prediction.candidates)}."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
