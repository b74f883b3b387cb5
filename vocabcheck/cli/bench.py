"""`vocabcheck bench`: TPOT per method and batch size, against the ideal and against transformers."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from .options import (
    MAX_REPEAT, MAX_WARMUP, AllowIncompatible, Device, Dtype, MaxNewTokens, Seed, Temperature, Translate,
    batch_sizes as parse_batch_sizes, proposal_lengths, whole_number,
)
from ..methods import MAX_K, Method
from .output import emit_json


def bench(
    target: str = typer.Argument(..., help="The target model."),
    draft: str = typer.Argument(None, help="The draft model (omit to bench none and ngram only)."),
    batch_sizes: str = typer.Option("1,16", "--batch-sizes", help="Comma-separated batch sizes."),
    methods: str = typer.Option("none,ngram,draft", "--methods", help="Comma-separated: none (plain decoding), "
                                                                      "ngram (prompt lookup), draft."),
    k: str = typer.Option("4,auto", "-k", "--num-speculative-tokens",
                          parser=proposal_lengths("-k / --num-speculative-tokens", many=True),
                          help=f"Tokens proposed per step: comma-separated whole numbers 1-{MAX_K} and/or auto, each "
                               "measured side by side."),
    max_new_tokens: MaxNewTokens = 64,
    prompts: Path = typer.Option(None, "--prompts", help="Prompt file (one per line, or JSONL); default: "
                                                         "function openings from Python's standard library."),
    prompt_format: str = typer.Option(None, "--prompt-format", help="text or jsonl (default: jsonl for a .jsonl "
                                                                    "--prompts file, text otherwise)."),
    warmup: int = typer.Option(1, "--warmup", parser=whole_number("--warmup", 0, MAX_WARMUP),
                               help="Untimed runs of every cell first."),
    repeat: int = typer.Option(3, "--repeat", parser=whole_number("--repeat", 1, MAX_REPEAT),
                               help="Timed runs of every cell (the median is reported)."),
    compare_hf: bool = typer.Option(False, "--compare-hf", help="Also time transformers' assisted generation "
                                                                "(batch 1)."),
    compare_vllm: bool = typer.Option(False, "--compare-vllm", help="Also run every fixed-k cell on vLLM (an "
                                                                    "optional dependency), each repeat paired with "
                                                                    "vocabcheck's."),
    device: Device = "auto",
    dtype: Dtype = "auto",
    allow_incompatible: AllowIncompatible = False,
    translate: Translate = False,
    temperature: Temperature = 0.0,
    seed: Seed = 0,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (schema vocabcheck.bench/1)."),
    report: Path = typer.Option(None, "--report", help="Write bench.md, bench.json and charts to this directory."),
    served: Path = typer.Option(None, "--served", help="predict's JSON (`vocabcheck predict --json`, or predict.json "
                                                       "in its --report): also measure the k it serves per batch "
                                                       "size against every fixed k and plain decoding; with "
                                                       "--compare-vllm, its speculative_config as one vLLM engine."),
    predict: bool = typer.Option(False, "--predict", help="Also predict each speculative cell (as `vocabcheck "
                                                          "predict` does, before measuring) and show it beside "
                                                          "what was measured."),
) -> None:
    """Time per output token with no speculation, n-gram and draft model, per batch size; greedy output is
    checked against plain decoding in every cell (exit code 1 if it differs)."""
    from ..bench import BenchPlan, default_prompts, parse_ks, run_bench
    from ..bench.prediction import predict_cells
    from ..bench.served import read_plans, with_served_ks
    from ..decode import DecodeOptions, Sampling
    from ..decode.load.loading import Prompt, read_prompt_file
    from ..decode.session import RunRequest, start_session
    from ..errors import BadOption, ExitCode, VocabcheckError
    from ..machine import machine_description
    from ..render import bench_report, terminal
    from ..render.phases import phases

    bench_report.check_destination(report)  # before the benchmark runs: one line, exit code 2
    sizes = parse_batch_sizes(batch_sizes)
    chosen = Method.parse_list(methods)
    if max_new_tokens < 2:  # time per output token is measured over the tokens after the first
        raise BadOption(f"--max-new-tokens must be at least 2 for bench (time per output token counts the tokens "
                        f"after the first), not {max_new_tokens}")
    if any(m.needs_draft for m in chosen) and not draft:
        raise VocabcheckError("--methods includes draft but no DRAFT model was given")
    ks = parse_ks(k)
    # a file that cannot be used: one line, before anything runs
    tables = read_plans(served, chosen, draft) if served is not None else ()
    if tables and Method.NONE not in chosen:
        raise BadOption("--served sets each served table against plain decoding: add none to --methods")
    options = DecodeOptions(max_new_tokens=max_new_tokens, sampling=Sampling(temperature=temperature), seed=seed)
    plan = BenchPlan(batch_sizes=sizes, methods=chosen, options=options, warmup=warmup, repeat=repeat,
                     compare_hf=compare_hf, ks=with_served_ks(ks, tables, sizes), served=tables)
    texts = read_prompt_file(prompts, prompt_format) if prompts is not None else [Prompt(t) for t in default_prompts()]
    err = terminal.console(stderr=True)
    with terminal.progress_line(err, "loading the models"):
        session = start_session(RunRequest(target=target, draft=draft if any(m.needs_draft for m in chosen) else None,
                                           methods=_session_methods(chosen, predict), device=device, dtype=dtype,
                                           allow_incompatible=allow_incompatible, translate=translate,
                                           max_new_tokens=max_new_tokens),
                                on_refusal=lambda c: terminal.print_refusal(err, c))
    ids = session.encode(texts, chat=False)
    with phases(err, "benchmarking") as say:
        # the prediction runs before the measured cells, never inside one
        prediction = predict_cells(session, ids, plan, progress=say) if predict else None
        result = run_bench(session, ids, plan, progress=say, predict=prediction)
        if compare_vllm and not result.interrupted:
            result = _with_vllm(result, session, ids, plan, chosen, say)
    command = "vocabcheck " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "vocabcheck bench"
    machine = machine_description()
    measured = bool(result.rows or result.hf_rows)
    if report is not None and measured:  # an interrupted report says it is partial; with nothing measured, none
        bench_report.write_report(report, result, target=target, draft=draft, command=command, machine=machine)
    if json_out:
        emit_json(bench_report.bench_document(result, target=target, draft=draft, command=command))
    elif measured:
        bench_report.print_bench(terminal.console(), result)
    if result.interrupted:  # Ctrl-C: one line; the cells measured so far are printed above
        err.print(bench_report.interrupted_line(result, report=report if measured else None), soft_wrap=True)
        from .. import interrupts

        raise typer.Exit(interrupts.exit_code(result.signum or interrupts.signal.SIGINT))
    raise typer.Exit(ExitCode.OK if result.lossless else ExitCode.FAILED)


def _with_vllm(result, session, ids, plan, methods, say):
    """The result with vLLM's rows: the same pair through :mod:`vocabcheck.engines.vllm`, paired cell by cell."""
    import dataclasses

    from ..bench.vllm_rows import run_vllm_rows
    from ..engines import vllm_session

    vllm_session.open_session(session.request, progress=say)  # vLLM installed, the draft aligned: before any cell starts
    try:
        rows, note = run_vllm_rows(session, ids, plan, methods, progress=say)
    except KeyboardInterrupt:
        return dataclasses.replace(result, interrupted=True)
    return dataclasses.replace(result, vllm_rows=tuple(rows), vllm_note=note)


def _session_methods(chosen: tuple[Method, ...], predict: bool) -> tuple[Method, ...]:
    """The methods the session is started for: the prediction generates the target's own sequences (plain
    decoding) even where the bench does not measure it."""
    return tuple(dict.fromkeys(chosen + (Method.NONE,))) if predict else chosen
