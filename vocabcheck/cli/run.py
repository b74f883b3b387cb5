"""`vocabcheck run`: speculative generation for a compatible pair."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer

from .options import (
    ProposalLength, SpeculationMethod,
    AllowIncompatible, BatchSize, Device, Dtype, Engine, MaxNewTokens, NgramMax, NgramMin, Seed, Temperature, TopK, TopP, Translate,
    whole_number,
)
from ..methods import Method
from .output import emit_json


def run(
    target: str = typer.Argument(..., help="The target model (directory or hub id)."),
    draft: str = typer.Argument(None, help="The draft model; not needed for --method ngram or none."),
    method: SpeculationMethod = Method.DRAFT,
    prompt: list[str] = typer.Option(None, "--prompt", help="A prompt; repeat for several."),
    prompt_file: Path = typer.Option(None, "--prompt-file", help="One prompt per line, or JSONL."),
    prompt_format: str = typer.Option(None, "--prompt-format", help="text or jsonl (default: jsonl for a .jsonl "
                                                                    "--prompt-file, text otherwise)."),
    chat: bool = typer.Option(False, "--chat", help="Format prompts with the target's chat template."),
    k: ProposalLength = "auto",
    max_new_tokens: MaxNewTokens = 64,
    temperature: Temperature = 0.0,
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    seed: Seed = 0,
    batch_size: BatchSize = 1,
    ngram_min: NgramMin = 1,
    ngram_max: NgramMax = 3,
    device: Device = "auto",
    dtype: Dtype = "auto",
    engine: Engine = "vocabcheck",
    allow_incompatible: AllowIncompatible = False,
    translate: Translate = False,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (schema vocabcheck.run/1)."),
) -> None:
    """Generate with speculative decoding; prints the text, then acceptance and time per output token."""
    from ..decode import DecodeOptions, Sampling
    from ..decode.load.loading import Prompt, read_prompt_file
    from ..decode.session import RunRequest
    from ..engines import open_session
    from ..errors import VocabcheckError
    from ..render import data, terminal

    options = DecodeOptions(method=method, k=k, max_new_tokens=max_new_tokens, seed=seed, ngram_min=ngram_min,
                            ngram_max=ngram_max, sampling=Sampling(temperature=temperature, top_k=top_k, top_p=top_p))
    if method.needs_draft and not draft:
        raise VocabcheckError(f"--method {method} needs a DRAFT model (or use --method ngram / none)")
    prompts = [Prompt(p) for p in (prompt or [])]
    if prompt_file is not None:
        prompts += read_prompt_file(prompt_file, prompt_format)
    elif prompt_format is not None:
        _warn("--prompt-format does nothing without --prompt-file; ignored")
    if not prompts:
        raise VocabcheckError("give at least one --prompt or a --prompt-file")

    for note in _unused_options(method, draft, translate) + _unused_knobs(options):
        _warn(note)
    out = terminal.console()
    err = terminal.console(stderr=True)
    request = RunRequest(target=target, draft=draft if method.needs_draft else None, methods=(method,),
                         device=device, dtype=dtype, allow_incompatible=allow_incompatible, translate=translate,
                         max_new_tokens=max_new_tokens)
    with terminal.progress_line(err, "comparing the pair and loading the models" if method.needs_draft else
                                "loading the model"):
        session = open_session(engine, request, debug=_debugging(),
                               on_refusal=None if json_out else lambda c: terminal.print_refusal(err, c),
                               on_warning=_warn, progress=lambda line: print(line, file=sys.stderr))
    if engine == "vllm" and method.proposes and k == "auto":
        from ..engines.vllm import AUTO_K

        _warn(f"-k auto is vocabcheck's per-row controller; vLLM runs one k for every row: k = {AUTO_K} "
              "(give -k N to choose it)")
    stream = (not json_out and len(prompts) == 1 and sys.stdout.isatty())
    printer = terminal.StreamPrinter(out, session.target_profile) if stream else None
    if engine == "vllm":
        with terminal.progress_line(err, "starting vLLM and generating"):
            result = session.generate(prompts, options, chat=chat, batch_size=batch_size,
                                      on_tokens=printer.on_tokens if printer else None)
    else:
        with contextlib.nullcontext() if printer else terminal.progress_line(err, "generating"):
            result = session.generate(prompts, options, chat=chat, batch_size=batch_size,
                                      on_tokens=printer.on_tokens if printer else None)
    if json_out:
        emit_json(data.run_document(session, result, sampling=options.sampling, seed=options.seed, options=options))
    else:
        if printer:
            printer.finish()
        else:
            terminal.print_texts(out, session, result)
        terminal.print_metrics(out, session, result)
    if result.interrupted:  # Ctrl-C, SIGTERM, SIGHUP: what was generated so far is printed above
        from .. import interrupts

        raise typer.Exit(interrupts.report(result.signum))


def _unused_options(method: Method, draft: str | None, translate: bool) -> list[str]:
    """What the command line asks for that ``--method`` does not use: warned about (one line each), never silently
    dropped; the run goes on without it."""
    if method.needs_draft:
        return []
    notes = [f"DRAFT {draft} is not used by --method {method}; ignored"] if draft else []
    if translate:
        notes.append(f"--translate does nothing with --method {method} (it translates a draft model's proposals); "
                     "ignored")
    return notes


def _unused_knobs(options) -> list[str]:
    """Tuning options given away from their defaults where they change nothing: the n-gram range outside --method
    ngram, top-k and top-p in greedy decoding."""
    from ..decode import DecodeOptions, Sampling

    notes, default, unwarped = [], DecodeOptions(), Sampling()
    if options.method is not Method.NGRAM and (options.ngram_min, options.ngram_max) != (default.ngram_min, default.ngram_max):
        notes.append(f"--ngram-min/--ngram-max do nothing with --method {options.method}; ignored")
    sampling = options.sampling
    if sampling.greedy and (sampling.top_k, sampling.top_p) != (unwarped.top_k, unwarped.top_p):
        notes.append("--top-k/--top-p do nothing in greedy decoding (--temperature 0); ignored")
    return notes


def _debugging() -> bool:
    """--debug on the command line or VOCABCHECK_DEBUG: vLLM logs at INFO then."""
    import os

    return "--debug" in sys.argv or os.environ.get("VOCABCHECK_DEBUG", "") not in ("", "0")


def _warn(text: str) -> None:
    from ..text import printable

    print(f"warning: {printable(' '.join(text.split()))}", file=sys.stderr)
