"""`vocabcheck bench`: TPOT per method and batch size, against the ideal and against transformers."""

from __future__ import annotations

import contextlib
import platform
import shlex
import sys
from pathlib import Path

import typer

from .output import emit_json


def _csv(value: str, kind, what: str) -> tuple:
    from ..errors import VocabcheckError

    try:
        items = tuple(kind(v.strip()) for v in value.split(",") if v.strip())
    except ValueError as exc:
        raise VocabcheckError(f"--{what} takes a comma-separated list, not {value!r}") from exc
    if not items:
        raise VocabcheckError(f"--{what} is empty")
    return items


def bench(
    target: str = typer.Argument(..., help="The target model."),
    draft: str = typer.Argument(None, help="The draft model (omit to bench none and ngram only)."),
    batch_sizes: str = typer.Option("1,16", "--batch-sizes", help="Comma-separated batch sizes."),
    methods: str = typer.Option("none,ngram,draft", "--methods", help="Comma-separated: none, ngram, draft."),
    k: str = typer.Option(None, "-k", "--num-speculative-tokens",
                          help="Tokens proposed per step: comma-separated integers 1-64 and/or auto, each measured "
                               "side by side (default: 4,auto; 4 where the decoder has no auto)."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=2),
    prompts: Path = typer.Option(None, "--prompts", help="Prompt file (one per line, or JSONL); default: "
                                                         "function openings from Python's standard library."),
    warmup: int = typer.Option(1, "--warmup", min=0),
    repeat: int = typer.Option(3, "--repeat", min=1),
    compare_hf: bool = typer.Option(False, "--compare-hf", help="Also time transformers' assisted generation "
                                                                "(batch 1)."),
    device: str = typer.Option("auto", "--device"),
    dtype: str = typer.Option("auto", "--dtype"),
    allow_incompatible: bool = typer.Option(False, "--allow-incompatible"),
    translate: bool = typer.Option(False, "--translate", help="Run a draft whose tokenizer differs through the "
                                                              "tokens both share."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 is greedy (output checked against plain "
                                                                 "decoding); above 0 every cell samples."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampler."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (schema vocabcheck.bench/1)."),
    report: Path = typer.Option(None, "--report", help="Write bench.md, bench.json and charts to this directory."),
) -> None:
    """Time per output token with no speculation, n-gram and draft model, per batch size; greedy output is
    checked against plain decoding in every cell (exit code 1 if it differs)."""
    from ..bench import AUTO, BenchPlan, auto_supported, default_ks, default_prompts, parse_ks, run_bench
    from ..decode import METHODS, DecodeOptions, Sampling
    from ..decode.loading import Prompt, read_prompt_file
    from ..decode.session import RunRequest, start_session
    from ..errors import VocabcheckError
    from ..render import bench_report, terminal

    bench_report.check_destination(report)  # before the benchmark runs: one line, exit code 2
    sizes = _csv(batch_sizes, int, "batch-sizes")
    chosen = _csv(methods, str, "methods")
    if any(b < 1 for b in sizes):
        raise VocabcheckError("--batch-sizes must be positive")
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise VocabcheckError(f"--methods: unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    if "draft" in chosen and not draft:
        raise VocabcheckError("--methods includes draft but no DRAFT model was given")
    ks = parse_ks(k) if k is not None else default_ks()
    if AUTO in ks and not auto_supported():
        raise VocabcheckError("-k auto: this version's decoder has no adaptive proposal length; give integers")
    options = DecodeOptions(max_new_tokens=max_new_tokens, sampling=Sampling(temperature=temperature), seed=seed)
    plan = BenchPlan(batch_sizes=sizes, methods=chosen, options=options, warmup=warmup, repeat=repeat,
                     compare_hf=compare_hf, ks=ks)
    texts = read_prompt_file(prompts) if prompts is not None else [Prompt(t) for t in default_prompts()]
    err = terminal.console(stderr=True)
    session = start_session(RunRequest(target=target, draft=draft if "draft" in chosen else None, methods=chosen,
                                       device=device, dtype=dtype, allow_incompatible=allow_incompatible,
                                       translate=translate),
                            on_refusal=lambda c: terminal.print_refusal(err, c))
    ids = session.encode(texts, chat=False)
    quiet = json_out or not sys.stderr.isatty()
    with err.status("benchmarking") if not quiet else contextlib.nullcontext() as status:
        result = run_bench(session, ids, plan, progress=None if quiet else status.update)
    command = "vocabcheck " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "vocabcheck bench"
    machine = (f"{platform.machine()}, {platform.processor() or 'cpu'}, {_cores()} cores, "
               f"Python {platform.python_version()}")
    measured = bool(result.rows or result.hf_rows)
    if report is not None and measured:  # an interrupted report says it is partial; with nothing measured, none
        bench_report.write_report(report, result, target=target, draft=draft, command=command, machine=machine)
    if json_out:
        emit_json(bench_report.bench_document(result, target=target, draft=draft, command=command))
    elif measured:
        bench_report.print_bench(terminal.console(), result)
    if result.interrupted:  # Ctrl-C: one line; the cells measured so far are printed above
        err.print(bench_report.interrupted_line(result, report=report if measured else None), soft_wrap=True)
        raise typer.Exit(130)
    raise typer.Exit(0 if result.lossless else 1)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
