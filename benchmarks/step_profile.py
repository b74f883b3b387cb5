"""One warm call of the decoder under ``torch.profiler``: the operators that take its time, by self CPU time.

    python benchmarks/step_profile.py --method draft -k 2 --batch-size 16          # the demo pair, greedy
    python benchmarks/step_profile.py --method ngram -k 4 --batch-size 16 --temperature 1

How this project found where a step's time goes (the greedy pick's ``aten::max``, 15 % of a batch-16 draft call, and
the ragged verification's gather over the vocabulary: docs/decoder.md, "The greedy pick on the CPU"). One call runs
first, unprofiled (the head's kernel choices, the first shapes), then the profiled one; the table is torch's own.
Run it as a script (not ``-m``) so that ``PYTHONPATH`` chooses the vocabcheck it profiles; without ``--keep-cache``
it gets an empty cache directory (``VOCABCHECK_CACHE``). A profile, not a benchmark: the profiler adds its own time
to every operator, so read shares, not milliseconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

PROMPTS = Path(__file__).resolve().parent / "prompts-16.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=("none", "ngram", "draft"), default="draft")
    parser.add_argument("-k", default="auto")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--rows", type=int, default=20, help="operators to list")
    parser.add_argument("--keep-cache", action="store_true", help="use vocabcheck's own cache directory")
    args = parser.parse_args()

    from torch.profiler import ProfilerActivity, profile

    from vocabcheck.decode.loading import read_prompt_file
    from vocabcheck.decode.options import DecodeOptions
    from vocabcheck.decode.sampling import Sampling
    from vocabcheck.decode.session import RunRequest, start_session
    from vocabcheck.demo.pair import demo_pair

    pair = demo_pair()  # in vocabcheck's own cache directory, before a fresh one is chosen for what runs measure
    if not args.keep_cache:
        os.environ["VOCABCHECK_CACHE"] = tempfile.mkdtemp(prefix="vocabcheck-profile-")
    session = start_session(RunRequest(target=str(pair.target), draft=str(pair.draft) if args.method == "draft"
                                       else None, methods=(args.method,)))
    prompts = read_prompt_file(PROMPTS)[: args.batch_size]
    sampling = Sampling(temperature=args.temperature)
    options = (DecodeOptions(method="none", max_new_tokens=args.max_new_tokens, sampling=sampling)
               if args.method == "none" else
               DecodeOptions(method=args.method, k=args.k if args.k == "auto" else int(args.k),
                             max_new_tokens=args.max_new_tokens, sampling=sampling))
    session.generate(prompts, options, batch_size=args.batch_size)  # unprofiled: first shapes, kernel choices
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        result = session.generate(prompts, options, batch_size=args.batch_size)
    metrics = result.metrics
    print(f"{args.method} k={args.k} batch {args.batch_size}: {metrics.tokens_per_s:.0f} tokens/s "
          f"({metrics.generated} tokens, {metrics.verify_passes} steps) under the profiler")
    print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
