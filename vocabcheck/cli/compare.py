"""`vocabcheck compare`: the verdict on a target/draft pair, with a reason for every finding."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import NoProbe

from .output import emit_json, write_outputs


def compare(
    target: str = typer.Argument(..., help="The target model (the one whose output you want)."),
    draft: str = typer.Argument(..., help="The draft model (the one that proposes tokens)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (schema vocabcheck.compare/1)."),
    strict: bool = typer.Option(False, "--strict", help="Warnings fail the pair (exit code 1)."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write the report as Markdown to this file."),
    json_file: Path = typer.Option(None, "--json-file", help="Also write the JSON report to this file."),
    no_probe: NoProbe = False,
    quiet_info: bool = typer.Option(False, "--no-info", help="Hide info-level findings in the terminal report."),
) -> None:
    """Classify a pair as identical, padded-compatible or incompatible, with a reason for every finding.

    Exit code 0 for identical or padded-compatible, 1 for incompatible (or any warning with --strict),
    2 for bad input.
    """
    import vocabcheck
    from ..render import data, markdown as md, terminal

    with terminal.progress_line(terminal.console(stderr=True), "comparing the pair"):  # a hub pair may take a while
        comparison = vocabcheck.compare(target, draft, probe=not no_probe)
    document = data.compare_document(comparison, strict=strict)
    write_outputs({json_file: lambda: data.dumps(document),
                   markdown: lambda: md.comparison_markdown(comparison, strict=strict)})
    if json_out:
        emit_json(document)
    else:
        terminal.print_comparison(terminal.console(), comparison, strict=strict, show_info=not quiet_info)
    raise typer.Exit(1 if comparison.failed(strict) else 0)
