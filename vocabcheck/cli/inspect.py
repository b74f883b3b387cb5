"""`vocabcheck inspect`: one model's profile."""

from __future__ import annotations

import typer

from .output import emit_json


def inspect(
    model: str = typer.Argument(..., help="A model directory, tokenizer file, GGUF file or hub id (org/name[@rev])."),
    json_out: bool = typer.Option(False, "--json", help="Print the profile as JSON (schema vocabcheck.inspect/1)."),
) -> None:
    """Show one model's profile: tokenizer, special tokens, embedding rows and fingerprint."""
    import vocabcheck
    from ..render import data, terminal

    profile = vocabcheck.inspect(model)
    if json_out:
        emit_json(data.inspect_document(profile))
    else:
        terminal.print_profile(terminal.console(), profile)
