"""What a vLLM step costs, by the engine's k and by how its rows drafted; and what a cold engine's first run costs.

    python -m benchmarks.vllm_steps steps TARGET --k 4      # one engine per call: vLLM fails a second in one process
    python -m benchmarks.vllm_steps cold TARGET DRAFT       # a fresh engine's runs, alone and beside two others

Run with the python of a venv that has vLLM (CI's: ~/.cache/vocabcheck-ci/vllm/bin/python), on a quiet machine,
from the repository root; prompts: benchmarks/prompts-16.jsonl, encoded as bench encodes them, 64 tokens each,
eos ignored, at batch 16 (every prompt in one batch).

``steps`` starts an n-gram engine at k and times its decode steps 5 times over (``vllm_session.timed_steps``, the
steps `predict --engine vllm` times): each round's mean step (a step counted once per row it ran for) and, over every
round, the median step per width (the rows' mean proposals, rounded). It printed, at `251745b` on 2 cores, vLLM
0.32.0: k = 4, mean 56-61 ms, width 3 70 ms, width 4 44 ms; k = 8, width 4 114 ms, width 8 49 ms — so a step's cost
depends on the engine's k and on how evenly its rows drafted, which is why predict prices each k by its own engine.

``cold`` starts a fresh n-gram k = 2 engine (``max_num_seqs`` 16) and runs every prompt 4 times, then plain
decoding's; then, with two served-table engines alive (bench --served's), a fresh k = 2 engine again. It printed
k = 2 alone 18.3, 17.1, 16.0, 16.6 ms a token; beside two engines 24.8, 18.7, 19.9, 18.6: the first full run of a
fresh engine is no sample, which is why bench warms every vLLM engine with ``--warmup`` full runs.

Nothing is written; the figures go to stdout. A diagnosis, not a benchmark of record.
"""

from __future__ import annotations

import argparse
import collections
import statistics
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "benchmarks" / "prompts-16.jsonl"
TOKENS, BATCH, ROUNDS = 64, 16, 5


def _prompts(target: str) -> list[list[int]]:
    """The prompt file's token ids as bench and predict encode them (no chat template)."""
    from vocabcheck.decode.load.loading import encode_prompts, read_prompt_file
    from vocabcheck.profile import profile_of

    return encode_prompts(profile_of(target), read_prompt_file(PROMPTS), chat=False)


def steps(target: str, k: int) -> None:
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.decode.session import RunRequest
    from vocabcheck.engines import vllm_session
    from vocabcheck.methods import Method

    prompts = _prompts(target)
    options = DecodeOptions(method=Method.NGRAM, k=k, max_new_tokens=8, ignore_eos=True)
    session = vllm_session.open_session(RunRequest(target=target, draft=None, methods=("ngram",), device="cpu",
                                                   dtype="auto"))
    try:
        session.generate_ids_batches([Prompt(None)] * len(prompts), prompts, options, batch_size=BATCH)
        timed = replace(options, max_new_tokens=TOKENS)
        llm = session.engine_for(timed, BATCH, prompts)
        params = vllm_session.sampling_params(timed, session.eos_ids, TOKENS)
        by_width, means = collections.defaultdict(list), []
        for _ in range(ROUNDS):
            timed_steps = vllm_session.timed_steps(llm, prompts, params, count_drafts=True)
            means.append(1000 * sum(s * live for s, live, _ in timed_steps) / sum(live for _, live, _ in timed_steps))
            for seconds, live, drafted in timed_steps:
                by_width[round(drafted / live)].append(1000 * seconds)
    finally:
        session.close()
    print(f"n-gram k={k}, batch {BATCH}: mean step per round (ms) {[round(m, 1) for m in means]}")
    for width, times in sorted(by_width.items()):
        print(f"  width {width}: {len(times)} steps, median {statistics.median(times):.1f} ms")


def cold(target: str, draft: str) -> None:
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.engines.vllm_worker import EngineProcess, job
    from vocabcheck.methods import Method

    prompts = _prompts(target)

    def engine(method, k, with_draft=None, schedule=None):
        options = DecodeOptions(method=method, k=max(k, 1), max_new_tokens=TOKENS, ignore_eos=True)
        return EngineProcess(job(target, with_draft, method, k, options, BATCH, "cpu", "auto", prompts,
                                 schedule=schedule))

    def runs(process, label):
        print(f"{label}: TPOT ms {[round(process.run(TOKENS, BATCH)['tpot_ms'], 2) for _ in range(4)]}", flush=True)

    for method, k, label in ((Method.NGRAM, 2, "n-gram k=2, fresh, alone"), (Method.NONE, 0, "plain, fresh, alone")):
        process = engine(method, k)
        try:
            runs(process, label)
        finally:
            process.close()
    others = [engine(Method.NGRAM, 4, schedule=((1, 15, 4), (16, 16, 2))),
              engine(Method.DRAFT, 4, with_draft=draft, schedule=((1, 15, 4), (16, 16, 0)))]
    try:
        process = engine(Method.NGRAM, 2)
        try:
            runs(process, "n-gram k=2, fresh, two other engines alive")
        finally:
            process.close()
    finally:
        for other in others:
            other.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("steps")
    one.add_argument("target")
    one.add_argument("--k", type=int, default=4)
    two = sub.add_parser("cold")
    two.add_argument("target")
    two.add_argument("draft")
    args = parser.parse_args()
    if args.what == "steps":
        steps(args.target, args.k)
    else:
        cold(args.target, args.draft)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
