"""`vocabcheck align`: write a draft that fits its target exactly, and print the engines' command lines."""

from __future__ import annotations

from pathlib import Path

import typer

from .app import app
from .output import emit_json


@app.command()
def align(
    target: str = typer.Argument(..., help="The target model directory (its rows and tokenizer files are used)."),
    draft: str = typer.Argument(..., help="The draft model directory (a safetensors checkpoint)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the aligned draft into."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (schema vocabcheck.align/1)."),
    num_speculative_tokens: int = typer.Option(5, "--num-speculative-tokens", "-k",
                                               help="Draft tokens per step in the printed engine commands."),
    tensor_parallel_size: int = typer.Option(None, "--tensor-parallel-size",
                                             help="The target's tensor-parallel size, passed to the engines."),
    draft_tensor_parallel_size: int = typer.Option(None, "--draft-tensor-parallel-size",
                                                   help="vLLM's draft_tensor_parallel_size (1 or the target's)."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Skip the encoding probe of differing tokenizers."),
) -> None:
    """Pad or cut the draft's embedding and lm_head to the target's rows so that vLLM and SGLang accept the pair.

    Refuses (exit code 1) unless compare says identical or padded-compatible.

    Writes DIR atomically, checks that `compare TARGET DIR` says identical, then prints the engines' command lines.
    """
    from .. import compare, reshape
    from ..engines import ServeOptions, engine_commands

    options = ServeOptions(num_speculative_tokens, tensor_parallel_size, draft_tensor_parallel_size)
    options.check()
    reshape.check_out(out, force=force, inputs=tuple(Path(p) for p in (target, draft) if Path(p).exists()))
    comparison = compare(target, draft, probe=not no_probe)
    if comparison.verdict.rank == 0 and json_out:
        emit_json(reshape.refusal_document(comparison, out))
    reshape.check_alignable(comparison)  # raises RefusedPair: exit code 1
    result = reshape.write_aligned(reshape.plan(comparison), out, force=force)
    commands = engine_commands(target, str(out), options)
    if json_out:
        emit_json(reshape.align_document(result, commands))
    else:
        _print(result, commands)


def _print(result, commands) -> None:
    from rich.panel import Panel
    from rich.text import Text

    from ..render import terminal

    console = terminal.console()
    plan = result.plan
    comparison = plan.comparison
    head = Text.assemble(terminal.verdict_text(comparison.verdict), "  ", comparison.reason)
    console.print(Panel(head, title=terminal.pair_title(comparison), title_align="left", expand=True))
    for r in plan.resizes:
        change = f"{r.source_rows:,} → {r.rows:,} rows" if r.rows != r.source_rows else f"{r.rows:,} rows, unchanged"
        extra = f", {r.added:,} zero rows added" if r.added else (f", {r.dropped:,} rows dropped" if r.dropped else "")
        console.print(Text(f" {r.role:<16} {r.name}  {change}{extra} ({r.dtype})"))
    if plan.tied:
        console.print(Text(" lm_head          tied to the input embedding (no lm_head tensor written)"))
    others = sum(s.tensors for s in result.shards) - sum(len(s.resized) for s in result.shards)
    console.print(Text(f" {others:,} other tensors copied byte for byte into {len(result.shards)} shard(s); "
                       f"tokenizer files from the target: {', '.join(plan.tokenizer_files) or 'none'}"))
    for note in plan.notes:
        console.print(Text(f" · {note}", style="dim"))
    check = Text(f"compare {comparison.target.spec} {result.out}: ", style="bold")
    check.append_text(terminal.verdict_text(result.verdict_after))
    console.print(check)
    console.print(Text("Serve the pair:", style="bold"))
    for command in commands:
        console.print(Text(f"# {command.engine} ({command.docs})", style="dim"), soft_wrap=True)
        console.print(Text(command.shell()), soft_wrap=True)
