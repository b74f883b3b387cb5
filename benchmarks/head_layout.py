"""Which kernel computes the output head on the CPU, and what that does to a speculative step, measured side by side.

    python -m benchmarks.head_layout [--repeat 5] [--out reports/head-layout.md]

Part 1, the head alone: logits for m rows of hidden states against a 152,064-row float32 head (seeded random
weights) as wide as the demo draft's (32), the demo target's (256), Qwen2.5-0.5B's (896) and Qwen2.5-7B's (3,584),
computed as the model does (``F.linear(h, W)``: MKL), as ``W @ h.T`` (MKL in the other layout), and through
oneDNN: the three candidates :class:`vocabcheck.decode.cpu.head.TunedHead` chooses from. m = 1 is a plain decoding
step, 5 a verify chunk at k = 4, 16 a plain step at batch 16 and 80 a verify chunk at batch 16. Interleaved
repeats, medians.

Part 2, the whole decoder: `vocabcheck bench`'s cells (none, n-gram, draft; batch 1 and 16; greedy) on the demo
pair, once with both models' heads left to their own forward and once as shipped (the tuned head), alternating one
repeat of each, so both see the same machine.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

from vocabcheck.provenance import current


def head_alone(vocab: int, hidden: int, rows: tuple[int, ...], repeat: int) -> dict[int, dict[str, float]]:
    """Median ms per way of computing the logits of m rows against a [vocab, hidden] float32 head."""
    from vocabcheck.decode.cpu.head import candidates

    generator = torch.Generator().manual_seed(hidden)
    weight = torch.randn(vocab, hidden, generator=generator) / hidden ** 0.5
    ways = {name: functools.partial(kernel, weight=weight) for name, kernel in candidates().items()}
    times: dict[tuple[int, str], list[float]] = {}
    inputs = {m: torch.randn(1, m, hidden, generator=generator) for m in rows}
    with torch.inference_mode():
        for m in rows:  # the same logits every way, to float32 rounding
            reference = ways["mkl"](inputs[m])
            for name, way in ways.items():
                assert torch.allclose(way(inputs[m]), reference, rtol=1e-4, atol=1e-4), (name, m)
        for _ in range(repeat + 2):
            for m in rows:
                for name, way in ways.items():
                    start = time.perf_counter()
                    way(inputs[m])
                    times.setdefault((m, name), []).append(time.perf_counter() - start)
    return {m: {name: statistics.median(times[m, name][2:]) * 1e3 for name in ways} for m in rows}


def whole_decoder(target: Path, draft: Path, repeat: int):
    import vocabcheck.decode.state as state
    from vocabcheck.bench import BenchPlan, default_prompts, run_bench
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.decode.session import RunRequest, start_session

    session = start_session(RunRequest(target=str(target), draft=str(draft)))
    ids = session.encode([Prompt(t) for t in default_prompts()], chat=False)
    own = state.cpu_head
    variants = {"model's forward": lambda model: None, "as shipped": own}
    results = {name: [] for name in variants}
    try:
        for turn in range(repeat + 1):  # the first turn warms both up and is dropped
            for name, choose in (variants.items() if turn % 2 == 0 else reversed(variants.items())):
                state.cpu_head = choose
                plan = BenchPlan(batch_sizes=(1, 16), options=DecodeOptions(k=4), warmup=0, repeat=1)
                result = run_bench(session, ids, plan)
                if turn:
                    results[name].append(result)
                print(f"turn {turn}: {name}", file=sys.stderr)
    finally:
        state.cpu_head = own
    return results


def summarise(runs) -> dict[tuple[str, int], dict[str, float]]:
    cells = {}
    for key in {(r.method, r.batch_size) for r in runs[0].rows}:
        rows = [run.row(*key) for run in runs]
        median = lambda attr: statistics.median(getattr(r, attr) for r in rows)  # noqa: E731
        cells[key] = {"tpot": median("tpot_ms"), "lossless": all(r.lossless is not False for r in rows)}
        if key[0] != "none":
            cells[key].update(speedup=median("speedup"), verify=median("verify_cost"), ideal=median("ideal_speedup"),
                              efficiency=median("efficiency"))
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    args = parser.parse_args(argv)

    from vocabcheck import atomic
    from vocabcheck.decode.cpu.head import onednn_available
    from vocabcheck.demo import qwen
    from vocabcheck.demo.pair import demo_pair

    pair = demo_pair()
    rows = (1, 2, 5, 8, 16, 24, 32, 80)
    widths = {32: "the demo draft's", 256: "the demo target's", 896: "Qwen2.5-0.5B's", 3584: "Qwen2.5-7B's"}
    alone = {hidden: head_alone(qwen.ROWS_LARGE, hidden, rows, args.repeat) for hidden in widths}
    decoder = {name: summarise(runs) for name, runs in whole_decoder(pair.target, pair.draft, args.repeat).items()}

    threads = torch.get_num_threads()
    lines = [
        "# The output head's kernel on the CPU",
        "",
        "```sh",
        f"python -m benchmarks.head_layout --repeat {args.repeat}" + (f" --out {args.out}" if args.out else ""),
        "```",
        "",
        f"{current().line().replace('measured', 'Measured', 1)}, {threads} torch threads, "
        f"torch {torch.__version__} ({'MKL' if torch.backends.mkl.is_available() else 'no MKL'}).",
        "",
        f"## The head alone (median ms per call, {qwen.ROWS_LARGE:,} float32 rows, median of {args.repeat})",
        "",
        "vocabcheck's engine times these candidates on the calls that serve each size of row count and keeps the "
        f"fastest (oneDNN available and checked here: {'yes' if onednn_available() else 'NO'}); the fastest in each row "
        "is **bold**.",
        "",
        "| hidden | rows | `F.linear(h, W)` (the model's own, MKL) | `W @ h.T` (MKL) | oneDNN | fastest vs F.linear |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for hidden, name in widths.items():
        for m in rows:
            cell = alone[hidden][m]
            best = min(cell, key=cell.get)
            shown = [f"**{cell[w]:.1f}**" if w == best else f"{cell[w]:.1f}" for w in ("mkl", "mkl-columns", "onednn")]
            lines.append(f"| {hidden} ({name}) | {m} | {' | '.join(shown)} | "
                         f"{cell['mkl'] / cell[best]:.2f}× |")
    lines += ["", "## The whole decoder (demo pair, k = 4, greedy, median of "
              f"{args.repeat} alternating repeats)", "",
              "| method | batch | head | TPOT ms | speedup over none | verify cost | ideal | efficiency | lossless |",
              "|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for batch in (1, 16):
        for method in ("none", "ngram", "draft"):
            for name, cells in decoder.items():
                cell = cells[(method, batch)]
                extra = (f"{cell['speedup']:.2f}× | {cell['verify']:.2f}× | {cell['ideal']:.2f}× | "
                         f"{cell['efficiency']:.2f}" if method != "none" else "— | — | — | —")
                lines.append(f"| {method} | {batch} | {name} | {cell['tpot']:.2f} | {extra} | "
                             f"{'yes' if cell['lossless'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        atomic.write_text(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
