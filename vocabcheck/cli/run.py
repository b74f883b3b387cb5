"""`vocabcheck run`: speculative generation for a compatible pair."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .output import emit_json


def run(
    target: str = typer.Argument(..., help="The target model (directory or hub id)."),
    draft: str = typer.Argument(None, help="The draft model; not needed for --method ngram or none."),
    method: str = typer.Option("draft", "--method", help="draft, ngram (prompt lookup) or none (plain decoding)."),
    prompt: list[str] = typer.Option(None, "--prompt", help="A prompt; repeat for several."),
    prompt_file: Path = typer.Option(None, "--prompt-file", help="One prompt per line, or JSONL."),
    chat: bool = typer.Option(False, "--chat", help="Format prompts with the target's chat template."),
    k: str = typer.Option("auto", "-k", "--num-speculative-tokens",
                          help="Tokens proposed per step: auto (chosen every step from measured costs and "
                               "acceptance, 0-8) or a fixed 1-64."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Tokens to generate per prompt."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 is greedy."),
    top_k: int = typer.Option(0, "--top-k", help="Keep the k most likely tokens (0: off)."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass, in (0, 1] (1: off)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampler."),
    batch_size: int = typer.Option(1, "--batch-size", help="Prompts run together (left-padded)."),
    ngram_min: int = typer.Option(1, "--ngram-min", help="Shortest n-gram to match."),
    ngram_max: int = typer.Option(3, "--ngram-max", help="Longest n-gram to match."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, float32, bfloat16 or float16."),
    allow_incompatible: bool = typer.Option(False, "--allow-incompatible",
                                            help="Run an incompatible pair anyway, with raw ids (still lossless)."),
    translate: bool = typer.Option(False, "--translate", help="Run a pair whose tokenizers differ through the tokens "
                                                              "they share (lossless, greedy and sampled)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (schema vocabcheck.run/1)."),
) -> None:
    """Generate with speculative decoding; prints the text, then acceptance and time per output token."""
    from ..decode import DecodeOptions, Sampling
    from ..decode.options import parse_k
    from ..decode.loading import Prompt, read_prompt_file
    from ..decode.session import RunRequest, start_session
    from ..errors import BadOption, VocabcheckError
    from ..render import data, terminal

    options = DecodeOptions(method=method, k=parse_k(k), max_new_tokens=max_new_tokens, seed=seed,
                            ngram_min=ngram_min, ngram_max=ngram_max, sampling=Sampling(temperature=temperature, top_k=top_k, top_p=top_p))
    if batch_size < 1:
        raise BadOption(f"--batch-size must be at least 1, not {batch_size}")
    if method == "draft" and not draft:
        raise VocabcheckError("--method draft needs a DRAFT model (or use --method ngram / none)")
    prompts = [Prompt(p) for p in (prompt or [])]
    if prompt_file is not None:
        prompts += read_prompt_file(prompt_file)
    if not prompts:
        raise VocabcheckError("give at least one --prompt or a --prompt-file")

    out = terminal.console()
    err = terminal.console(stderr=True)
    session = start_session(RunRequest(target=target, draft=draft if method == "draft" else None, methods=(method,),
                                       device=device, dtype=dtype, allow_incompatible=allow_incompatible,
                                       translate=translate),
                            on_refusal=None if json_out else lambda c: terminal.print_refusal(err, c))
    stream = (not json_out and len(prompts) == 1 and sys.stdout.isatty())
    printer = terminal.StreamPrinter(out, session.target_profile) if stream else None
    result = session.generate(prompts, options, chat=chat, batch_size=batch_size,
                              on_tokens=printer.on_tokens if printer else None)
    if json_out:
        emit_json(data.run_document(session, result, sampling=options.sampling, seed=options.seed))
    else:
        if printer:
            printer.finish()
        else:
            terminal.print_texts(out, session, result)
        terminal.print_metrics(out, session, result)
    if result.interrupted:  # Ctrl-C: what was generated so far is printed above
        raise typer.Exit(130)
