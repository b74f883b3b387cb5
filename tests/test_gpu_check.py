"""benchmarks/gpu_check.py, the one command a GPU session runs, checked where no GPU is lent: every part at toy
sizes on the CPU, and a clear refusal where CUDA is asked for and absent."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

from vocabcheck.render.data import schema

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script checks the checkout it lives in


def test_every_part_runs_at_toy_sizes_and_writes_its_report(tmp_path):
    out = tmp_path / "gpu"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--skip-tests", "--out",
                           str(out)], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "gpu-check.json").read_text())
    cases = report["lossless_float32"]
    assert {c["case"].split(":")[0] for c in cases} == {"padded rows", "cut rows",
                                                         "sliding window 8, contexts of 6-8 windows"}
    assert {c["method"] for c in cases} == {"draft", "ngram"} and all(c["lossless"] for c in cases)
    assert any(0 < c["acceptance_rate"] < 1 for c in cases)
    match = report["bfloat16_match"]
    assert match["dtype"] == "float32"  # on the CPU the pair runs in float32, where speculation is exact
    assert match["draft"]["identical_sequences"] == match["ngram"]["identical_sequences"] == 1.0
    jsonschema.validate(report["bench"], schema("bench-1"))
    methods = {(row["method"], row["batch_size"]) for row in report["bench"]["rows"]}
    assert {("none", 1), ("ngram", 1), ("draft", 1), ("none", 4), ("ngram", 4), ("draft", 4)} <= methods
    assert {row["method"] for row in report["bench"]["hf_rows"]} >= {"hf-none", "hf-draft"}
    markdown = (out / "gpu-check.md").read_text()
    assert "| sliding window 8, contexts of 6-8 windows | draft | 4 | yes |" in markdown
    assert (out / "bench" / "bench.md").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_says_so(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          env=ENV)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "sees no CUDA device" in proc.stderr


@pytest.mark.parametrize(("deadlines", "after"), [(["--part-deadline", "2"], "ok"),
                                                  (["--deadline", "2", "--part-deadline", "600"], "not run")],
                         ids=["part", "whole-run"])
def test_a_stuck_part_still_leaves_a_report(monkeypatch, tmp_path, deadlines, after):
    """A part that never returns is stopped at its deadline (its own, or what is left of the run's) and reported as
    timed out; the parts after it run (or, past the run's deadline, say they did not), and the report is written."""
    script = importlib.import_module("benchmarks.gpu_check")
    monkeypatch.setattr(script, "lossless_checks", lambda *args, **kwargs: signal.pause())  # stuck until stopped
    monkeypatch.setattr(script, "qwen_shaped_session", lambda *args, **kwargs: "session")
    match = {"dtype": "float32", "sequences": 1, "tokens": 8,
             **{m: {"identical_sequences": 1.0, "mean_prefix_before_difference": 1.0} for m in ("ngram", "draft")}}
    monkeypatch.setattr(script, "bf16_match", lambda *args, **kwargs: match)
    monkeypatch.setattr(script, "bench", lambda *args, **kwargs: {"rows": []})
    out = tmp_path / "gpu"
    code = script.main(["--device", "cpu", "--tiny", "--skip-tests", "--out", str(out), *deadlines])
    assert code == 1  # incomplete is not ok
    report = json.loads((out / "gpu-check.json").read_text())
    parts = {name: part["status"] for name, part in report["parts"].items()}
    assert parts == {"float32 losslessness": "timed out", "Qwen2.5-shaped pair": after,
                     **({"bfloat16 match": "ok", "bench": "ok"} if after == "ok" else {})}
    assert report["lossless_float32"] is None
    assert "| float32 losslessness | timed out |" in (out / "gpu-check.md").read_text()
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
