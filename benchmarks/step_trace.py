"""One call of the decoder traced step by step, in-process: per proposal width, how many steps and their mean time,
and how long the CPU head spent timing its kernels (calls that ran a candidate to time it, or, in a checkout whose
head timed candidates beside the call, the whole of that timing).

    python benchmarks/step_trace.py --method draft -k auto --batch-size 16       # the demo pair, a fresh cache
    python benchmarks/step_trace.py --method none --batch-size 16 --calls 2      # the first call, then a warm one
    python benchmarks/step_trace.py --method draft -k 2 --calls 2 --profile       # ... the last under torch.profiler

Run it as a script (not ``-m``) so that ``PYTHONPATH`` chooses the vocabcheck it traces: ``PYTHONPATH=<another
checkout> python benchmarks/step_trace.py ...`` traces that checkout's decoder. Without ``--keep-cache`` each run
gets an empty cache directory (``VOCABCHECK_CACHE``): a machine's first process. The figures are ``run``'s own
``metrics.tokens_per_s`` (generation only) and step times as the controller sees them (from one step's end to the
next's; in a checkout before that, from one read-back to the next). A trace, not a benchmark: one process, one call
per line; compare processes run one after the other. With ``--profile`` the last call runs under ``torch.profiler``
and its operators are listed by self CPU time (how the greedy pick's ``aten::max`` and the ragged verification's
gather were found: docs/decoder.md, "The greedy pick on the CPU"); the profiler adds its own time to every operator,
so read shares, not milliseconds.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from pathlib import Path

PROMPTS = Path(__file__).resolve().parent / "prompts-16.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=("none", "ngram", "draft"), default="draft")
    parser.add_argument("-k", default="auto")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--keep-cache", action="store_true", help="use vocabcheck's own cache directory")
    parser.add_argument("--profile", action="store_true", help="the last call under torch.profiler")
    args = parser.parse_args()

    from vocabcheck.decode import engine
    from vocabcheck.decode.cpu import head
    from vocabcheck.decode.load.loading import read_prompt_file
    from vocabcheck.decode.options import DecodeOptions
    from vocabcheck.decode.session import RunRequest, start_session
    from vocabcheck.demo.pair import demo_pair

    pair = demo_pair()  # in vocabcheck's own cache directory, before a fresh one is chosen for what runs measure
    if not args.keep_cache:
        os.environ["VOCABCHECK_CACHE"] = tempfile.mkdtemp(prefix="vocabcheck-trace-")
    session = start_session(RunRequest(target=str(pair.target), draft=str(pair.draft) if args.method == "draft"
                                       else None, methods=(args.method,)))
    prompts = read_prompt_file(PROMPTS)

    steps: list[tuple[int, float]] = []
    observe = engine.observe_time

    def traced_observe(batch, width, *rest, **named):  # (width, at), or (width, live, at) where a step is timed to
        at = rest[-1]  # its end
        previous = batch.stamp if batch.stamp is not None else batch.metrics.prefill_s
        steps.append((width, at - previous))
        return observe(batch, width, *rest, **named)

    engine.observe_time = traced_observe
    timing = [0.0]
    call = head.TunedHead.__call__

    def traced_head(self, hidden):
        before = getattr(head.TunedHead, "races", None)
        start = time.perf_counter()
        out = call(self, hidden)
        if before is not None and head.TunedHead.races != before:
            timing[0] += time.perf_counter() - start
        return out

    head.TunedHead.__call__ = traced_head
    if hasattr(head.TunedHead, "_fastest"):  # a checkout whose head timed candidates beside the call
        fastest = head.TunedHead._fastest

        def traced_fastest(self, hidden):
            start = time.perf_counter()
            try:
                return fastest(self, hidden)
            finally:
                timing[0] += time.perf_counter() - start

        head.TunedHead._fastest = traced_fastest

    k = args.k if args.k == "auto" else int(args.k)
    options = (DecodeOptions(method="none", max_new_tokens=args.max_new_tokens) if args.method == "none"
               else DecodeOptions(method=args.method, k=k, max_new_tokens=args.max_new_tokens))
    for number in range(args.calls):
        steps.clear()
        timing[0] = 0.0
        if args.profile and number == args.calls - 1:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as profiled:
                result = session.generate(prompts, options, batch_size=args.batch_size)
            print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
        else:
            result = session.generate(prompts, options, batch_size=args.batch_size)
        widths = collections.defaultdict(list)
        for width, seconds in steps:
            widths[width].append(seconds * 1000)
        per_width = ", ".join(f"W={w}: {len(v)} steps, {sum(v) / len(v):.1f} ms" for w, v in sorted(widths.items()))
        print(f"call {number}: {result.metrics.tokens_per_s:.0f} tokens/s ({result.metrics.generated} tokens); "
              f"head kernel timing {timing[0] * 1000:.0f} ms; {per_width}")


if __name__ == "__main__":
    main()
