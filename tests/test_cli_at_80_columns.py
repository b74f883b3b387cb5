"""The newcomer's first hour (issue 38): compare, run, bench, predict and the demo's story, with stdout and stderr
written to files at 80 columns and models under long paths (as the demo's are, in the user cache), read whole: no
table line over 80 columns, no cell cut to ``…`` or folded in the middle of a word, each model shown by the
distinctive tail of its path, no Python warning text, and progress lines on stderr only (``--json`` stdout is the
document alone, which keeps every path whole)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rich.cells import cell_len

WARNING_TEXT = re.compile(r"\w*Warning: |warnings\.warn\(")
PROGRESS = re.compile(r"^vocabcheck: ", re.MULTILINE)


@pytest.fixture(scope="module")
def cache_pair(tmp_path_factory, qwen_pair):
    """The fixture pair linked under a path like the demo's, ``…/.cache/vocabcheck/demo-v4/qwen2.5-shaped-*``, and
    a second draft of the same name in ``demo-v3``: two drafts that differ only in a directory halfway up."""
    root = tmp_path_factory.mktemp("home") / "someone" / ".cache" / "vocabcheck"
    target, draft = qwen_pair
    links = {}
    for name, source in (("demo-v4/qwen2.5-shaped-target", target), ("demo-v4/qwen2.5-shaped-draft", draft),
                         ("demo-v3/qwen2.5-shaped-draft", draft)):
        link = root / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(source).resolve(), target_is_directory=True)
        links[name] = link
    assert len(str(links["demo-v4/qwen2.5-shaped-draft"])) > 40  # long enough to be shortened
    return links["demo-v4/qwen2.5-shaped-target"], links["demo-v4/qwen2.5-shaped-draft"], \
        links["demo-v3/qwen2.5-shaped-draft"]


def run_to_files(tmp_path: Path, *argv) -> tuple[int, str, str]:
    """``python -m vocabcheck ARGV`` with stdout and stderr redirected to files, at COLUMNS=80."""
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("PYTHONWARNINGS", None)
    with out_path.open("w") as out, err_path.open("w") as err:
        code = subprocess.run([sys.executable, "-m", "vocabcheck", *map(str, argv)], stdout=out, stderr=err,
                              stdin=subprocess.DEVNULL, env=env, timeout=600).returncode
    return code, out_path.read_text(encoding="utf-8"), err_path.read_text(encoding="utf-8")


def assert_reads_at_80(out: str, err: str, skip=lambda line: False) -> None:
    """No line over 80 columns (but the lines ``skip`` names: generated text, commands to copy), no ellipsis but a
    shortened path's ``…/``, no warning text, no progress line on stdout."""
    for line in out.splitlines():
        if not skip(line):
            assert cell_len(line.rstrip()) <= 80, f"{line!r} is over 80 columns in\n{out}"
    assert not re.search("…(?!/)", out), out
    assert not WARNING_TEXT.search(out) and not WARNING_TEXT.search(err), err
    assert not PROGRESS.search(out), out


def without_text(out: str) -> str:
    """``out`` less the generated text (a tiny model's tokens, any width), from ``[0] `` to the metrics table."""
    return re.sub(r"^\[0\] .*?(?=^ *Speculative decoding)", "", out, flags=re.S | re.M)


def has_whole(out: str, *words: str) -> None:
    """Each word on one line, unbroken (a folded cell splits it over two)."""
    for word in words:
        assert any(word in line for line in out.splitlines()), f"{word!r} is not whole in\n{out}"


def test_compare_shows_both_models_by_their_tails_and_folds_no_word(cache_pair, tmp_path):
    target, draft, _ = cache_pair
    code, out, err = run_to_files(tmp_path, "compare", target, draft)
    assert code == 0, err
    assert_reads_at_80(out, err)
    has_whole(out, "(model.embed_tokens.weight)", "…/qwen2.5-shaped-target", "qwen2.5-shaped-draft (draft)")
    title = out.splitlines()[0]
    assert "(target) ←" in title and title.rstrip().endswith("╮") and "(draft)" in title, title
    code, out, err = run_to_files(tmp_path, "compare", target, draft, "--json")
    document = json.loads(out)
    assert (document["target"]["spec"], document["draft"]["spec"]) == (str(target), str(draft)), out


@pytest.mark.parametrize("k", ["2", "auto"])  # auto adds the kept step costs' row
def test_run_metrics_read_at_80_columns(cache_pair, tmp_path, k):
    target, draft, _ = cache_pair
    code, out, err = run_to_files(tmp_path, "run", target, draft, "--prompt", "def f(x):", "--max-new-tokens", 4,
                                  "-k", k)
    assert code == 0, err
    assert "Speculative decoding" in out, out
    assert_reads_at_80(without_text(out), err)
    has_whole(out, "time per output token", "acceptance rate", *(["kept step costs"] if k == "auto" else []))


def test_bench_reads_at_80_columns_and_its_progress_is_on_stderr(cache_pair, tmp_path):
    target, draft, _ = cache_pair
    code, out, err = run_to_files(tmp_path, "bench", target, draft, "--batch-sizes", 1, "--max-new-tokens", 3,
                                  "--repeat", 1, "--warmup", 0, "-k", 2)
    assert code == 0, err
    assert_reads_at_80(out, err)
    assert "vocabcheck: benchmarking" in err.splitlines(), err
    has_whole(out, "draft model (k=2), batch 1")


def test_predict_tells_two_drafts_apart_cuts_no_cell_and_reports_progress_on_stderr(cache_pair, tmp_path):
    target, draft, other = cache_pair
    report = tmp_path / "report"  # one run: the terminal's view on stdout, the same prediction's JSON in the report
    argv = ("predict", target, draft, other, "--prompt", "def f(x):", "-k", "1,2", "--max-new-tokens", 3,
            "--report", report)
    code, out, err = run_to_files(tmp_path, *argv)
    assert code == 0, err
    assert_reads_at_80(out, err)
    has_whole(out, "…/demo-v4/qwen2.5-shaped-draft", "…/demo-v3/qwen2.5-shaped-draft", "candidate",
              "acceptance", "predicted speedup")
    passes = [line for line in err.splitlines() if line.startswith("vocabcheck: predicting: ")]
    assert passes and passes[-1].startswith("vocabcheck: predicting: 8 of 8 passes done"), err
    document = json.loads((report / "predict.json").read_text(encoding="utf-8"))
    assert [d["draft"] for d in document["drafts"]] != [] and \
        {d["draft"] for d in document["drafts"]} == {str(draft), str(other)}, document
    assert PROGRESS.search(err) and not WARNING_TEXT.search(err), err


def test_the_demo_story_reads_at_80_columns(cache_pair, monkeypatch):
    """The demo's own views (its compare and run; the bench's table is bench's), without training its pair: the
    story is told about the fixture pair under its cache-like path. Its commands to copy are one line each."""
    from vocabcheck.cli import demo_story
    from vocabcheck.demo.pair import DemoPair

    target, draft, _ = cache_pair
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(demo_story, "demo_pair", lambda rebuild=False, progress=None: DemoPair(target, draft, False))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        demo_story.tell(bench=False)
    out, err = out.getvalue(), err.getvalue()
    assert_reads_at_80(without_text(out), err, skip=lambda line: line.startswith("vocabcheck "))  # commands to copy
    has_whole(out, "(model.embed_tokens.weight)", "qwen2.5-shaped-draft (draft)", "time per output token")
