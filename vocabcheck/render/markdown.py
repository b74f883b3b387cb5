"""Markdown reports, for CI summaries and committed results."""

from __future__ import annotations

from collections.abc import Iterable

from ..findings import Severity
from ..verdict import Comparison
from ..text import printable

ICON = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}


def escape(text: str) -> str:
    """Table-cell text: pipes escaped, one line, < > & as entities (GitHub would read '<unk>' as a tag), and control
    characters as visible escapes."""
    return printable(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
                     .replace("\n", " "))


def document(lines: Iterable[str]) -> str:
    """The lines of a report as one Markdown text; no control character of the data survives, whichever line it
    reached (the report's own line breaks stay)."""
    return printable("\n".join(lines), keep="\n")


def comparison_markdown(comparison: Comparison, *, strict: bool = False) -> str:
    lines = [
        f"### `{escape(comparison.target.spec)}` (target) ← `{escape(comparison.draft.spec)}` (draft)",
        "",
        f"**{comparison.verdict.value}** — {escape(comparison.reason)}"
        + (" (fails under --strict)" if strict and comparison.failed(strict=True)
           and comparison.verdict.value != "incompatible" else ""),
        "",
        "| severity | code | finding |",
        "|---|---|---|",
    ]
    for finding in comparison.findings:
        lines.append(f"| {ICON[finding.severity]} {finding.severity.value} | `{finding.code}` | "
                     f"{escape(finding.message)} |")
    a = comparison.alignment
    lines += ["", f"Alignment: target rows {a.target_rows:,}, draft rows {a.draft_rows:,}, mapping `{a.mapping}`, "
                  f"{a.shared_ids:,} shared ids, substitute id {a.draft_substitute_id}.", ""]
    return document(lines)
