"""Output that reads anywhere: every view, written to a file or a CI log (80 columns), keeps its cells whole (a table
that cannot fit is stacked, one block per row) and its command lines on one line; a reader that goes away (``| head
-1``) ends the command quietly with its own exit code; ``--debug`` works after the command too."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from tests.test_gate import manifest
from vocabcheck.bench.plan import BenchPlan, BenchResult, Row
from vocabcheck.render import bench_report, terminal

ELLIPSIS = "…"


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what rich uses for a file; set in case the suite runs in a wide terminal


def readable(text: str) -> None:
    """At most 80 columns a line and no cell cut to an ellipsis (a path shortened to its tail, ``…/dir/model``, is
    not cut: it is the whole of what the view means to show)."""
    assert not re.search(f"{ELLIPSIS}(?!/)", text), text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text


def console(width: int = 80):
    return terminal.console().__class__(file=io.StringIO(), width=width, highlight=False, soft_wrap=False,
                                        markup=False)


def bench_result() -> BenchResult:
    rows = tuple(Row(method, batch, 12.345, (12.1, 13.2), 81.2, None if method == "none" else 0.71,
                     None if method == "none" else 3.1, (0.9, 0.8), None if method == "none" else 1.93, 2.1, 0.91,
                     0.7, 0.05, 1.2, 0.95, True, k=0 if method == "none" else 4, prompts=8)
                 for method in ("none", "ngram", "draft") for batch in (1, 16))
    hf = (Row("hf-draft-tli", 1, 20.5, (20.1, 21.0), 48.2, 0.6, 2.7, (), 1.1, k=4, prompts=8),)
    return BenchResult(BenchPlan(), rows, hf, "cpu", "float32", prompts=8, seconds=10.0)


def test_bench_tables_read_at_80_columns():
    out = console()
    bench_report.print_bench(out, bench_result())
    text = out.file.getvalue()
    readable(text)
    # every figure of every cell is there whole: the Per cell table is stacked, a block per (method, batch)
    for heading in ("no speculation, batch 1", "draft model (k=4), batch 16",
                    "transformers, assisted (token-level intersection) (k=4), batch 1"):
        assert heading in text.splitlines(), text
    assert text.count("12.35 (12.10–13.20)") == 6 and "20.50 (20.10–21.00)" in text
    assert text.count("engine eff.") == 7


def test_a_table_that_fits_stays_a_table():
    out = console(width=250)
    bench_report.print_bench(out, bench_result())
    header = next(line for line in out.file.getvalue().splitlines() if "verify cost" in line)
    assert "TPOT ms (min–max)" in header and "lossless" in header  # one header line: the table, not blocks


def test_commands_are_never_split():
    command = "vocabcheck compare '/a path/with spaces/qwen2.5-shaped-target' /another/long/path/qwen2.5-shaped-draft"
    out = console(width=40)
    terminal.print_command(out, command)
    assert out.file.getvalue() == command + "\n"


def test_compare_inspect_and_gate_read_at_80_columns(cli, qwen_pair, tmp_path):
    target, draft = qwen_pair
    code, out, err = cli("compare", target, draft)
    assert code == 0, err
    readable(out)
    assert "lm_head tied" in out
    for model, tied in ((target, "no (tensors)"), (draft, "yes (tensors)")):  # 152,064 rows untied, 151,936 tied
        code, out, err = cli("inspect", model)
        assert code == 0, err
        readable(out)
        assert any(line.split() == ["│", "lm_head", "tied", *tied.split(), "│"] for line in out.splitlines()), out
        assert "'<|endoftext|>'" in out and "special" in out  # the added tokens, whole
    path = manifest(tmp_path / "gate.toml",
                    {"target": target, "draft": draft, "expect": "identical"},
                    {"name": "the pair", "target": target, "draft": draft, "expect": "padded-compatible"})
    code, out, err = cli("gate", path, "--no-probe")
    assert code == 1, err
    readable(out)
    lines = out.splitlines()
    assert len(lines) <= 24, out  # two pairs: a block each, not a table 40 lines tall of one-word columns
    assert "the pair" in lines and "✗ FAIL" in out and "✓ pass" in out


def _closed_reader(argv: list[str]) -> subprocess.CompletedProcess:
    """Run the command with a stdout whose reader has already gone (``| head -0``): every write meets EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "vocabcheck", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=600, env={**os.environ, "COLUMNS": "80"})
    finally:
        os.close(write)


@pytest.mark.parametrize("json_out", [False, True])
def test_a_closed_pipe_keeps_the_verdicts_exit_code(qwen_pair, qwen25_json, mistral_json, json_out):
    flags = ["--json"] if json_out else []
    compatible = _closed_reader(["compare", str(qwen_pair[0]), str(qwen_pair[1]), "--no-probe", *flags])
    assert (compatible.returncode, compatible.stderr) == (0, "")
    incompatible = _closed_reader(["compare", str(qwen25_json), str(mistral_json("v1")), "--no-probe", *flags])
    assert (incompatible.returncode, incompatible.stderr) == (1, "")


def test_debug_works_after_the_command(cli, tmp_path):
    missing = tmp_path / "no-such-model"
    before = cli("--debug", "inspect", missing)
    after = cli("inspect", missing, "--debug")
    assert before.code == after.code == 2
    assert "Traceback" in after.err and after.err.strip().splitlines()[-1] == before.err.strip().splitlines()[-1]
    assert after.err.strip().splitlines()[-1].startswith("error: ") and str(missing) in after.err
    code, _, err = cli("inspect", missing)  # and without it, one line
    assert code == 2 and len(err.strip().splitlines()) == 1
