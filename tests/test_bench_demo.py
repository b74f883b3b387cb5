"""Smoke tests of `vocabcheck bench` and `vocabcheck demo` at tiny sizes; the full benchmark runs by hand and its
output is committed in reports/."""

from __future__ import annotations

import json

import jsonschema
import pytest

from vocabcheck.bench import alpha_from_length, ideal_speedup
from vocabcheck.cli import main
from vocabcheck.demo import pair as demo_pair_module
from vocabcheck.demo.checkpoint import ModelShape
from vocabcheck.demo.train import TrainPlan
from vocabcheck.render.data import schema


def test_ideal_speedup_is_leviathan_formula():
    for alpha in (0.3, 0.5, 0.8):
        for k in (1, 4, 8):
            length = (1 - alpha ** (k + 1)) / (1 - alpha)
            assert alpha_from_length(length, k) == pytest.approx(alpha, abs=1e-9)
            c = 0.1
            assert ideal_speedup(length, k, c) == pytest.approx((1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1)))


def test_bench_json_report_and_hf_comparison(capsys, qwen_pair, tmp_path):
    target, draft = qwen_pair
    report = tmp_path / "report"
    code = main(["bench", str(target), str(draft), "--batch-sizes", "1,2", "--max-new-tokens", "6", "--repeat", "2",
                 "--warmup", "0", "--json", "--report", str(report), "--compare-hf", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("bench-1"))
    cells = {(r["method"], r["batch_size"]) for r in document["rows"]}
    assert cells == {(m, b) for m in ("none", "ngram", "draft") for b in (1, 2)}
    assert document["lossless"] is True
    draft_row = next(r for r in document["rows"] if r["method"] == "draft" and r["batch_size"] == 1)
    assert draft_row["ideal_speedup"] == pytest.approx(
        draft_row["mean_accepted_length"] / (4 * draft_row["cost_ratio"] + 1))
    assert draft_row["efficiency"] == pytest.approx(draft_row["speedup"] / draft_row["ideal_speedup"])
    # the pair's vocab_size differs: transformers needs its different-tokenizer path, and says so
    hf = {r["method"] for r in document["hf_rows"]}
    assert hf == {"hf-none", "hf-ngram", "hf-draft-uad"}
    assert "Universal Assisted Decoding" in document["hf_note"]
    assert all(r["lossless"] for r in document["hf_rows"])
    for name in ("bench.md", "bench.json", "tpot.png", "acceptance.png"):
        assert (report / name).stat().st_size > 0
    assert (report / "tpot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| batch |" in (report / "bench.md").read_text()


def test_bench_rejects_bad_options(capsys, qwen_pair):
    target, draft = qwen_pair
    for argv, words in ((["--methods", "none,beam"], "unknown method"), (["--batch-sizes", "1,x"], "--batch-sizes"),
                        (["--batch-sizes", "0"], "positive")):
        code = main(["bench", str(target), str(draft)] + argv)
        _, err = capsys.readouterr()
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_demo_tells_the_whole_story_at_a_tiny_size(capsys, monkeypatch, tmp_path):
    """The real row counts and tokenizer, tiny widths and a few training steps."""
    monkeypatch.setenv("VOCABCHECK_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "80")  # a file or a CI log: what rich lays out for when stdout is not a terminal
    monkeypatch.setattr(demo_pair_module, "PLAN", TrainPlan(corpus_tokens=4000, seq_len=16, batch=4, target_steps=2,
                                                            draft_steps=2))
    monkeypatch.setattr(demo_pair_module, "TARGET_SHAPE", ModelShape(rows=152064, hidden=16, layers=1, heads=2,
                                                                     kv_heads=1, intermediate=32, tied=False,
                                                                     shard_bytes=6_000_000))
    monkeypatch.setattr(demo_pair_module, "DRAFT_SHAPE", ModelShape(rows=151936, hidden=8, layers=1, heads=2,
                                                                    kv_heads=1, intermediate=16, tied=True))
    code = main(["demo"])
    out, err = capsys.readouterr()
    assert code == 0, err
    for words in ("vLLM raises", "PADDED-COMPATIBLE", "vocabcheck run", "acceptance rate", "Lossless: the speculative "
                  "output is token for token", "vocabcheck bench", "no speculation"):
        assert words in out, words
    built = demo_pair_module.demo_pair()
    assert built.built is False  # cached now
    # copy-pasteable at 80 columns (COLUMNS below): every command of "Try it yourself" on one line, with both paths
    commands = [line for line in out[out.index("Try it yourself"):].splitlines()[1:] if line.strip()]
    assert [line.split()[:2] for line in commands] == [["vocabcheck", verb] for verb in
                                                      ("compare", "run", "bench", "align")], out
    assert all(str(built.target) in line and str(built.draft) in line for line in commands), out
    recipe = json.loads((built.target.parent / demo_pair_module.RECIPE_FILE).read_text())
    assert recipe["target"]["rows"] == 152064 and recipe["draft"]["rows"] == 151936
    index = json.loads((built.target / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2  # the target is sharded
