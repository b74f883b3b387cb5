"""Every report says which code it measured, when and where: the bench report's header names the commit, the date
(UTC) and the machine, and a checkout that is no git checkout (or a machine without git) reads ``unknown``."""

from __future__ import annotations

import re
import subprocess

from tests.test_cli_output import bench_result
from vocabcheck import provenance
from vocabcheck.render import bench_report


def header(markdown: str) -> list[str]:
    return markdown.split("## Time per output token")[0].splitlines()


def test_the_bench_report_header_names_the_commit_the_date_and_the_machine():
    markdown = bench_report.bench_markdown(bench_result(), target="t", draft="d", command="c", machine="2 cores")
    lines = [line for line in header(markdown) if line.startswith("- measured at: ")]
    assert len(lines) == 1, header(markdown)
    assert re.fullmatch(r"- measured at: commit `([0-9a-f]{4,}(\+dirty)?|unknown)` "
                        r"\(\d{4}-\d\d-\d\d \d\d:\d\d UTC\), machine: 2 cores", lines[0]), lines[0]


def test_a_given_provenance_is_what_the_header_says():
    made = provenance.Provenance("abc1234+dirty", "2026-12-05 14:03 UTC", "x86_64, 2 cores")
    markdown = bench_report.bench_markdown(bench_result(), target="t", draft="d", command="c", machine="m",
                                           provenance=made)
    assert "- measured at: commit `abc1234+dirty` (2026-12-05 14:03 UTC), machine: x86_64, 2 cores" in header(markdown)


def test_this_checkout_names_its_commit():
    head = subprocess.run(["git", "-C", str(provenance.CHECKOUT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    if not head:  # not run from a git checkout (an unpacked source tree): nothing to compare with
        assert provenance.commit() == "unknown"
        return
    assert provenance.commit().removesuffix("+dirty") == head


def test_no_checkout_or_no_git_is_unknown_and_never_an_error(tmp_path, monkeypatch):
    assert provenance.commit(tmp_path) == "unknown"
    (tmp_path / ".git").mkdir()  # looks like a checkout, but git cannot read it
    assert provenance.commit(tmp_path) == "unknown"
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-dir"))
    assert provenance.commit() == "unknown"
    assert provenance.current("m").commit == "unknown"
