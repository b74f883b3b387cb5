"""Ctrl-C to `vocabcheck bench --report` during its first repeat (issue 23, row 11): exit 130 with one clean line on
stderr (no library warnings, no source paths), no squashed table, and report files that say they are partial — or,
when no cell was measured yet, no report at all.

The signal is sent when the program says (on a pipe) that it is about to measure the chosen batch; the program
then blocks reading a pipe the test never writes to, so it cannot finish before the signal arrives."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MEASURING = b"measuring\n"

# `vocabcheck bench` as its console script runs it; the N-th batch it measures first says so, then waits for the
# signal (a read of a pipe nobody writes to: the signal's handler raises inside it)
BENCH_WAITING_AT_A_BATCH = f"""
import os, sys
from vocabcheck.decode import session as session_module

ready, wait_on, at = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
calls, real = [], session_module.Session.generate_ids

def generate_ids(self, prompt_ids, options, on_tokens=None):
    calls.append(options.method)
    if len(calls) == at:
        os.write(ready, {MEASURING!r})
        os.read(wait_on, 1)
    return real(self, prompt_ids, options, on_tokens)

session_module.Session.generate_ids = generate_ids
from vocabcheck.cli.app import console_main
sys.argv = ["vocabcheck", *sys.argv[4:]]
console_main()
"""


def bench_interrupted_at(batch: int, argv: list[str], tmp_path: Path,
                         signum: int = signal.SIGINT) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "COLUMNS": "200",
           "VOCABCHECK_CACHE": str(tmp_path / "cache"), "TRANSFORMERS_VERBOSITY": "error"}
    ready_read, ready_write = os.pipe()
    wait_read, wait_write = os.pipe()
    process = subprocess.Popen([sys.executable, "-c", BENCH_WAITING_AT_A_BATCH, str(ready_write), str(wait_read),
                                str(batch), *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=ROOT, pass_fds=(ready_write, wait_read))
    os.close(ready_write)
    os.close(wait_read)
    try:
        readable, _, _ = select.select([ready_read], [], [], 600)  # a bound on a failure, not a timing
        assert readable, "the bench never reached the batch"
        assert os.read(ready_read, 64) == MEASURING, "the bench ended before the batch"
        process.send_signal(signum)
        out, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(ready_read)
        os.close(wait_write)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode(), err.decode())


@pytest.fixture
def bench_argv(qwen_pair, tmp_path):
    target, _ = qwen_pair
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps("def fibonacci(n):\n") + "\n" + json.dumps("class Stack:\n") + "\n")
    return ["bench", str(target), "--methods", "none,ngram", "--batch-sizes", "1", "-k", "2", "--max-new-tokens", "4",
            "--repeat", "2", "--warmup", "0", "--prompts", str(prompts), "--device", "cpu", "--report",
            str(tmp_path / "report")]


def clean(stderr: str) -> None:
    assert "Warning" not in stderr and "Traceback" not in stderr and ".py:" not in stderr, stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_after_a_cell_leaves_a_report_that_says_it_is_partial(bench_argv, tmp_path, signum):
    """SIGTERM (a CI job's timeout) as Ctrl-C: what was measured is printed and reported, exit 128 + the signal."""
    # two prompts at batch 1: the first cell (plain decoding) is two batches; the signal comes at the next cell's first
    done = bench_interrupted_at(3, bench_argv, tmp_path, signum)
    assert done.returncode == 128 + signum, done.stderr
    clean(done.stderr)
    assert without_progress(done.stderr) == [
        f"interrupted during repeat 1 of 2; 1 of 2 cells measured; the report in "
        f"{tmp_path / 'report'} says it is partial"]
    table = next(line for line in done.stdout.splitlines() if "batch" in line)
    assert "no speculation" in table, done.stdout  # the measured cell's column, not a squashed one-column table
    report = tmp_path / "report"
    assert "**PARTIAL — interrupted during repeat 1 of 2" in (report / "bench.md").read_text()
    document = json.loads((report / "bench.json").read_text())
    assert document["partial"] is True and document["interrupted"] is True and document["repeats_done"] == 0
    assert [(r["method"], r["prompts"]) for r in document["rows"]] == [("none", 2)]
    for chart in ("tpot.png", "acceptance.png"):
        assert (report / chart).read_bytes()[:4] == b"\x89PNG"


def without_progress(stderr: str) -> list[str]:
    """stderr's lines after the progress lines a log gets (``vocabcheck: <phase>``, all before the last line)."""
    lines = stderr.strip().splitlines()
    progress = [line for line in lines if line.startswith("vocabcheck: ")]
    assert lines[:len(progress)] == progress, lines  # progress first, then what the command ends with
    return lines[len(progress):]


def test_ctrl_c_before_any_cell_is_measured_writes_no_report(bench_argv, tmp_path):
    done = bench_interrupted_at(2, bench_argv, tmp_path)  # inside the first cell, at its second batch
    assert done.returncode == 130, done.stderr
    clean(done.stderr)
    assert without_progress(done.stderr) == ["interrupted before any cell was measured; no report written"]
    assert done.stdout == ""
    assert not (tmp_path / "report").exists()
