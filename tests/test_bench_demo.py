"""Smoke tests of `vocabcheck bench` and `vocabcheck demo` at tiny sizes; the full benchmark runs by hand and its
output is committed in reports/."""

from __future__ import annotations

import json

import jsonschema
import pytest

from vocabcheck.bench import alpha_from_length, ideal_speedup, parse_ks
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


PROMPTS = ("def fibonacci(n):\n", "def parse(text):\n", "class Stack:\n")


@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


def test_bench_json_report_and_hf_comparison(capsys, qwen_pair, tmp_path, prompt_file):
    target, draft = qwen_pair
    report = tmp_path / "report"
    code = main(["bench", str(target), str(draft), "--batch-sizes", "1,2", "--max-new-tokens", "6", "--repeat", "2",
                 "--warmup", "0", "-k", "2,4", "--prompts", str(prompt_file), "--json", "--report", str(report),
                 "--compare-hf", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("bench-1"))
    cells = {(r["method"], r["batch_size"], r["k"]) for r in document["rows"]}
    assert cells == {("none", b, 0) for b in (1, 2)} | {(m, b, k) for m in ("ngram", "draft") for b in (1, 2)
                                                        for k in (2, 4)}
    # every cell ran every prompt: 3 at batch 1, and at batch 2 two batches (the third prompt's batch filled up)
    assert all(r["prompts"] == (3 if r["batch_size"] == 1 else 4) for r in document["rows"])
    assert document["plan"]["ks"] == [2, 4] and document["plan"]["k"] is None
    assert document["lossless"] is True
    draft_row = next(r for r in document["rows"] if r["method"] == "draft" and r["batch_size"] == 1 and r["k"] == 4)
    assert draft_row["ideal_speedup"] == pytest.approx(
        draft_row["mean_accepted_length"] / (4 * draft_row["cost_ratio"] + 1))
    assert draft_row["efficiency"] == pytest.approx(draft_row["speedup"] / draft_row["ideal_speedup"])
    assert draft_row["mean_proposed"] <= 4
    # the pair's vocab_size differs: transformers needs its different-tokenizer path, and says so; its rows ignore
    # eos as ours do, so their greedy output is ours, prompt by prompt. That path raises inside transformers on some
    # prompts (5.25: "cannot reshape tensor of 0 elements"): such a cell is listed as failed, with its reason
    hf = {(r["method"], r["k"]) for r in document["hf_rows"]}
    failed = {(f["method"], f["k"]) for f in document["hf_failed"]}
    assert hf | failed == {("hf-none", 0), ("hf-ngram", 2), ("hf-ngram", 4), ("hf-draft-uad", 2), ("hf-draft-uad", 4)}
    assert not hf & failed and {("hf-none", 0), ("hf-ngram", 2), ("hf-ngram", 4)} <= hf
    assert all("\n" not in f["reason"] and f["reason"] for f in document["hf_failed"])
    assert all(r["prompts"] == 3 and r["lossless"] for r in document["hf_rows"])
    assert "Universal Assisted Decoding" in document["hf_note"]
    for name in ("bench.md", "bench.json", "tpot.png", "acceptance.png"):
        assert (report / name).stat().st_size > 0
    assert (report / "tpot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (report / "bench.md").read_text()
    assert "| batch |" in markdown and "draft model (k=2)" in markdown and "PARTIAL" not in markdown


def test_a_peer_that_raises_is_a_failed_cell_and_ours_stay(capsys, monkeypatch, qwen_pair, tmp_path, prompt_file):
    """transformers' Universal Assisted Decoding raising inside get_candidates (transformers 5.25, some prompts):
    that cell says why, in one line; every other cell is measured and the exit code is 0."""
    from vocabcheck.bench import run as bench_run

    real = bench_run.generate_one

    def failing(session, variant, *args, **kwargs):
        if variant.method == "hf-draft-uad":
            raise RuntimeError("cannot reshape tensor of 0 elements into shape [1, 0, -1]\nsecond line")
        return real(session, variant, *args, **kwargs)

    monkeypatch.setattr(bench_run, "generate_one", failing)
    report = tmp_path / "report"
    target, draft = qwen_pair
    code = main(["bench", str(target), str(draft), "--batch-sizes", "1", "--max-new-tokens", "4",
                 "--repeat", "1", "--warmup", "0", "-k", "3", "--prompts", str(prompt_file), "--json", "--report",
                 str(report), "--compare-hf", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("bench-1"))
    assert {(r["method"], r["k"]) for r in document["rows"]} == {("none", 0), ("ngram", 3), ("draft", 3)}
    assert {r["method"] for r in document["hf_rows"]} == {"hf-none", "hf-ngram"}
    assert document["hf_failed"] == [{"method": "hf-draft-uad", "batch_size": 1, "k": 3,
                                      "reason": "RuntimeError: cannot reshape tensor of 0 elements into shape "
                                                "[1, 0, -1]"}]
    assert "failed — RuntimeError: cannot reshape tensor of 0 elements" in (report / "bench.md").read_text()


def test_every_cell_runs_every_prompt_and_transformers_runs_between_ours(qwen_pair):
    """Each repeat visits our cells and transformers' alike (rotated), every cell over every prompt; a prediction,
    where one is given, sits beside what was measured."""
    from vocabcheck.bench import BenchPlan, run_bench
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.decode.session import RunRequest, start_session
    from vocabcheck.render import bench_report

    target, _ = qwen_pair
    session = start_session(RunRequest(target=str(target), draft=None, methods=("none", "ngram"), device="cpu"))
    ids = session.encode([Prompt(p) for p in PROMPTS], chat=False)
    plan = BenchPlan(batch_sizes=(1,), methods=("none", "ngram"), options=DecodeOptions(max_new_tokens=4), ks=(2,),
                     warmup=0, repeat=2, compare_hf=True)
    seen: list[str] = []
    result = run_bench(session, ids, plan, progress=seen.append, predict=lambda method, batch, k: 1.25)
    assert seen == ["repeat 1/2: none, batch 1", "repeat 1/2: ngram, batch 1, k=2", "repeat 1/2: hf-none, batch 1",
                    "repeat 1/2: hf-ngram, batch 1, k=2", "repeat 2/2: ngram, batch 1, k=2",
                    "repeat 2/2: hf-none, batch 1", "repeat 2/2: hf-ngram, batch 1, k=2", "repeat 2/2: none, batch 1"]
    assert all(r.prompts == len(PROMPTS) for r in result.rows + result.hf_rows)
    assert result.row("ngram", 1, 2).predicted_speedup == 1.25 and result.row("none", 1).predicted_speedup is None
    assert result.lossless and result.repeats_done == 2 and not result.partial
    markdown = bench_report.bench_markdown(result, target="t", draft=None, command="c", machine="m")
    assert "| predicted |" in markdown and "1.25×" in markdown


@pytest.fixture(scope="module")
def agreeing_qwen_pair(qwen_pair, tmp_path_factory):
    """The test pair's target and, as the draft, the target with its rows cut to the test draft's 151,936 and seeded
    noise on every weight: unlike the test draft (random, independent weights: nothing is ever accepted) it agrees
    with the target sometimes, not always."""
    import torch
    from transformers import AutoModelForCausalLM

    from vocabcheck.demo import qwen
    from vocabcheck.demo.checkpoint import write_model

    target, _ = qwen_pair
    state = AutoModelForCausalLM.from_pretrained(str(target)).state_dict()
    generator = torch.Generator().manual_seed(7)
    rows = qwen.ROWS_SMALL
    noisy = {key: value[:rows] if key in ("model.embed_tokens.weight", "lm_head.weight") else value
             for key, value in state.items()}
    noisy = {key: value + 0.3 * value.std() * torch.randn(value.shape, generator=generator)
             for key, value in noisy.items()}
    draft = write_model(tmp_path_factory.mktemp("bench-predict") / "draft", ModelShape(rows=rows, tied=False),
                        tokenizer_json=target / "tokenizer.json", tokenizer_config=qwen.tokenizer_config(),
                        generation_config=qwen.generation_config(), state_dict=noisy)
    return target, draft


def test_bench_predict_shows_the_prediction_beside_what_each_cell_measured(capsys, agreeing_qwen_pair, tmp_path,
                                                                           prompt_file):
    """`bench --predict`: every speculative cell carries predict's figures over the same prompts; greedy, at a fixed
    k, the predicted accepted tokens, acceptance and mean accepted length are what the cell measured in the same run
    (batch 2 cycles the third prompt, as the cell does); an auto cell carries the best fixed k's prediction."""
    target, draft = agreeing_qwen_pair
    report = tmp_path / "report"
    code = main(["bench", str(target), str(draft), "--batch-sizes", "1,2", "--max-new-tokens", "8", "--repeat", "1",
                 "--warmup", "0", "-k", "1,3,auto", "--prompts", str(prompt_file), "--json", "--report",
                 str(report), "--device", "cpu", "--predict"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("bench-1"))
    speculative = [r for r in document["rows"] if r["method"] != "none"]
    assert {(r["method"], r["batch_size"], r["k"]) for r in speculative} == {
        (m, b, k) for m in ("ngram", "draft") for b in (1, 2) for k in (1, 3, "auto")}
    for row in speculative:
        assert row["predicted_speedup"] is not None and row["predicted_speedup"] > 0, row
        if row["k"] == "auto":
            assert 1 <= row["predicted_k"] <= 8, row
            continue
        assert row["predicted_k"] == row["k"]
        assert row["predicted_accepted_tokens"] == row["accepted_tokens"], row
        assert row["predicted_acceptance_rate"] == pytest.approx(row["acceptance_rate"], abs=1e-12), row
        assert row["predicted_mean_accepted_length"] == pytest.approx(row["mean_accepted_length"], abs=1e-12), row
    # the equality above is not vacuous: the fixed-k draft cells accepted tokens
    assert all(r["accepted_tokens"] > 0 for r in speculative if r["method"] == "draft" and r["k"] != "auto")
    plain = [r for r in document["rows"] if r["method"] == "none"]
    assert all(r["predicted_k"] is None and r["predicted_accepted_tokens"] is None for r in plain)
    markdown = (report / "bench.md").read_text()
    assert "| pred. k | pred. accept | pred. mean len | predicted |" in markdown


def test_bench_rejects_bad_options(capsys, qwen_pair):
    target, draft = qwen_pair
    flag = "-k / --num-speculative-tokens"
    for argv, words in ((["--methods", "none,beam"], "--methods must be one of none, ngram, draft, not 'beam'"),
                        (["--batch-sizes", "1,x"], "--batch-sizes"), (["--batch-sizes", "0"], "positive"),
                        (["-k", "0"], f"{flag} must be between 1 and 64 or auto, not 0"),
                        (["-k", "4,x"], "not 'x'"), (["-k", "65"], "not 65"),
                        (["-k", ","], f"{flag} takes whole numbers from 1 to 64 or auto, comma-separated")):
        code = main(["bench", str(target), str(draft)] + argv)
        _, err = capsys.readouterr()
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_k_lists_take_integers_and_auto_in_the_order_given():
    assert parse_ks("1,2,4,8,auto") == (1, 2, 4, 8, "auto")
    assert parse_ks(" auto , 4,4") == ("auto", 4)


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
                                                      ("compare", "run", "run", "bench", "align")], out
    assert commands[2].endswith("--engine vllm"), out  # the same pair on vLLM, for a user who has it
    assert all(str(built.target) in line and str(built.draft) in line for line in commands), out
    recipe = json.loads((built.target.parent / demo_pair_module.RECIPE_FILE).read_text())
    assert recipe["target"]["rows"] == 152064 and recipe["draft"]["rows"] == 151936
    index = json.loads((built.target / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2  # the target is sharded


def test_phases_untimed_in_the_measured_runs_come_from_a_separate_timing_pass(qwen_pair):
    """Where the engine does not time phases (CUDA by default: it would cost a device sync per phase), the measured
    runs stay as `run` does them, and one timing pass per cell after the repeats gives the verification cost."""
    from vocabcheck.bench import BenchPlan, run_bench
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.decode.session import RunRequest, start_session

    target, _ = qwen_pair
    session = start_session(RunRequest(target=str(target), draft=None, methods=("none", "ngram"), device="cpu"))
    ids = session.encode([Prompt(p) for p in PROMPTS[:2]], chat=False)
    plan = BenchPlan(batch_sizes=(1,), methods=("none", "ngram"), ks=(2,), warmup=0, repeat=1,
                     options=DecodeOptions(max_new_tokens=4, time_phases=False))
    seen: list[str] = []
    result = run_bench(session, ids, plan, progress=seen.append)
    assert seen == ["repeat 1/1: none, batch 1", "repeat 1/1: ngram, batch 1, k=2", "timing pass: none, batch 1",
                    "timing pass: ngram, batch 1, k=2"]
    assert result.row("ngram", 1, 2).verify_cost is not None and result.row("ngram", 1, 2).verify_cost > 0
