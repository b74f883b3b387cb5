"""`vocabcheck matrix`: the verdict of every ordered pair of a model family."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .options import NoProbe

from .output import emit_json, write_outputs


def matrix(
    models: list[str] = typer.Argument(..., help="Model directories or tokenizer files, or a directory of model "
                                                 "directories."),
    json_out: bool = typer.Option(False, "--json", help="Print the matrix as JSON (schema vocabcheck.matrix/1)."),
    json_file: Path = typer.Option(None, "--json-file", help="Also write the JSON document to this file."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write the matrix as Markdown to this file."),
    no_probe: NoProbe = False,
) -> None:
    """The verdict of every ordered pair of a model family, for N profiles and one diff per pair of tokenizers.

    Each cell is what `vocabcheck compare TARGET DRAFT` says. Exit code 0, or 2 when a model cannot be read (the
    others are still shown).
    """
    from ..matrix import build_matrix
    from ..render import data, matrix_report, terminal

    result = build_matrix(models, probe=not no_probe)
    document = matrix_report.matrix_document(result) if json_out or json_file else None
    write_outputs({json_file: lambda: data.dumps(document), markdown: lambda: matrix_report.matrix_markdown(result)})
    if json_out:
        emit_json(document)
    else:
        matrix_report.print_matrix(terminal.console(), result)
    for error in result.errors:
        print(f"error: {error.error.one_line()}", file=sys.stderr)
    raise typer.Exit(result.exit_code)
