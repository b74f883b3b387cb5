"""`vocabcheck align`: write a draft that fits its target exactly, and print the engines' command lines."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import NoProbe, whole_number

from .output import emit_json


def align(
    target: str = typer.Argument(..., help="The target model directory (its rows and tokenizer files are used)."),
    draft: str = typer.Argument(..., help="The draft model directory (a safetensors checkpoint)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the aligned draft into."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (schema vocabcheck.align/1)."),
    num_speculative_tokens: int = typer.Option(5, "--num-speculative-tokens", "-k",
                                               parser=whole_number("--num-speculative-tokens"),
                                               help="Draft tokens per step in the printed engine commands."),
    tensor_parallel_size: int = typer.Option(None, "--tensor-parallel-size",
                                             parser=whole_number("--tensor-parallel-size"), metavar="N",
                                             help="The target's tensor-parallel size, passed to the engines."),
    draft_tensor_parallel_size: int = typer.Option(None, "--draft-tensor-parallel-size",
                                                   parser=whole_number("--draft-tensor-parallel-size"), metavar="N",
                                                   help="vLLM's draft_tensor_parallel_size (1 or the target's)."),
    no_probe: NoProbe = False,
) -> None:
    """Pad or cut the draft's embedding and lm_head to the target's rows so that vLLM and SGLang accept the pair.

    Refuses (exit code 1) unless compare says identical or padded-compatible.

    Writes DIR atomically, checks that `compare TARGET DIR` says identical, then prints the engines' command lines.
    """
    from ..aligner import IncompatiblePair, align_draft
    from ..engines.commands import ServeOptions
    from ..engines.vllm import validated
    from ..render import align_report, terminal

    serve = ServeOptions(num_speculative_tokens, tensor_parallel_size, draft_tensor_parallel_size)
    try:
        with terminal.progress_line(terminal.console(stderr=True), "comparing the pair and writing the aligned draft"):
            result = align_draft(target, draft, out, force=force, probe=not no_probe, serve=serve)
    except IncompatiblePair as refused:  # exit code 1; --json still says why
        if json_out:
            emit_json(align_report.refusal_document(refused.comparison, out))
        raise
    with terminal.progress_line(terminal.console(stderr=True), "checking the draft with vLLM's own validator"):
        result = validated(result)  # by vLLM's own SpeculativeConfig, where vLLM is installed
    if json_out:
        emit_json(align_report.align_document(result))
    else:
        align_report.print_aligned(terminal.console(), result)
