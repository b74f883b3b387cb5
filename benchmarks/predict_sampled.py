"""`predict --temperature` against runs: the predicted (expected) mean accepted length of sampled speculative
decoding against the one measured by the decoder, on the demo pair, for the demo draft and n-gram lookup.

Each prompt is repeated ``--repeats`` times, so the prediction averages over that many sequences sampled from the
target per prompt, and the measurement over that many sampled runs per prompt (one batch row each, with the shared
seed's independent draws). The figures are ratios of counts, not times, so the machine's load does not enter them.

    python -m benchmarks.predict_sampled --prompts 8 --repeats 4 --tokens 48 --out reports/predict/sampled.md
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from benchmarks.compare_speed import machine_line, publish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, action="append")
    parser.add_argument("-k", default="2,4")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from vocabcheck.bench.run import default_prompts
    from vocabcheck.decode import DecodeOptions, Sampling
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.decode.session import RunRequest, start_session
    from vocabcheck.demo.pair import demo_pair
    from vocabcheck.predict.predictor import PredictRequest, predict

    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    pair = demo_pair()
    temperatures = tuple(args.temperature or (1.0,))
    k_values = tuple(int(k) for k in args.k.split(","))
    prompts = [Prompt(text) for text in default_prompts(args.prompts) for _ in range(args.repeats)]
    options = DecodeOptions(method="none", max_new_tokens=args.tokens, ignore_eos=True, seed=1)
    prediction = predict(PredictRequest(target=str(pair.target), drafts=(str(pair.draft),), k_values=k_values,
                                        temperatures=temperatures, options=options, measure_costs=False), prompts)
    session = start_session(RunRequest(target=str(pair.target), draft=str(pair.draft), methods=("draft", "ngram")))
    command = "python -m benchmarks.predict_sampled " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = ["# predict: sampled acceptance, predicted against measured", "", machine_line(load_before),
             f"- command: `{command}`",
             f"- demo pair, {args.prompts} of bench's default prompts × {args.repeats} sampled runs each, "
             f"{args.tokens} new tokens (eos ignored); measured in batches of 16 rows, seed 0; predicted over "
             "sequences the target sampled with seed 1", "",
             "| candidate | temperature | k | mean accepted length predicted | measured | difference | "
             "acceptance predicted | measured |", "|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for candidate in prediction.candidates:
        for temperature, rows in candidate.sampled:
            for p in rows:
                measure = DecodeOptions(method=candidate.method, k=p.k, max_new_tokens=args.tokens, ignore_eos=True,
                                        sampling=Sampling(temperature=temperature))
                run = session.generate(prompts, measure, batch_size=16)
                m = run.metrics
                difference = p.counts.mean_accepted_length / m.mean_accepted_length - 1
                worst = max(worst, abs(difference))
                name = "n-gram lookup" if candidate.method == "ngram" else "demo draft"
                lines.append(f"| {name} | {temperature:g} | {p.k} | {p.counts.mean_accepted_length:.3f} | "
                             f"{m.mean_accepted_length:.3f} | {difference:+.1%} | {p.counts.acceptance_rate:.1%} | "
                             f"{m.acceptance_rate:.1%} |")
    lines += ["", f"Largest difference: {worst:.1%} (criterion: within 5 %). "
                  f"Ran in {time.perf_counter() - start:.0f} s."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
