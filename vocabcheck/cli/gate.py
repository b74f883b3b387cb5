"""`vocabcheck gate`: a CI gate over a TOML manifest of pairs, each with the verdict it must get."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from .options import NoProbe

from .output import write_outputs


def gate(
    manifest: Path = typer.Argument(..., help="TOML manifest: \\[\\[pair]] tables with target, draft and expect "
                                              "(or min), optional name, strict and allow."),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML (one testcase per pair) to this file."),
    json_file: Path = typer.Option(None, "--json", "--json-file",
                                   help="Write the report as JSON (schema vocabcheck.gate/1) to this file."),
    markdown: Path = typer.Option(None, "--markdown", help="Write the report as Markdown to this file (it is also "
                                                           "appended to $GITHUB_STEP_SUMMARY when that is set)."),
    no_probe: NoProbe = False,
) -> None:
    """Check every pair of a manifest against the verdict it must get; for CI.

    Exit code 0 when every pair is as expected, 1 when some are not, 2 when the manifest or a model cannot be read.
    A model that cannot be read errors its pairs only: the other pairs are still evaluated and reported.
    """
    from .. import gate as gating
    from ..render import data, gate_report, junit as junit_xml, terminal

    report = gating.gate(manifest, probe=not no_probe)
    gate_report.print_gate(terminal.console(), report)
    for message in dict.fromkeys(r.error.one_line() for r in report.results if r.error is not None):
        print(f"error: {message}", file=sys.stderr)
    text = gate_report.gate_markdown(report)
    files = {junit: lambda: junit_xml.gate_junit(report),
             json_file: lambda: data.dumps(gate_report.gate_document(report)), markdown: lambda: text}
    summary = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if summary:
        files[Path(summary)] = lambda: _appended(Path(summary), text)
    write_outputs(files)
    raise typer.Exit(report.exit_code)


def _appended(path: Path, text: str) -> str:
    from ..errors import InputError

    try:
        existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read $GITHUB_STEP_SUMMARY: {getattr(exc, 'strerror', None) or exc}", path) from exc
    return existing + ("\n" if existing and not existing.endswith("\n") else "") + text
