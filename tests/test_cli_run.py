"""`vocabcheck run`: text, acceptance and TPOT; JSON that validates; refusal of incompatible pairs."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from vocabcheck.render.data import schema


def test_run_prints_text_acceptance_and_tpot(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("run", target, draft, "--prompt", "def fibonacci(n):", "--max-new-tokens", 12,
                         "--device", "cpu")
    assert code == 0, err
    assert "def fibonacci(n):" in out
    for label in ("acceptance rate", "mean accepted length", "time per output token", "tokens/s", "draft, k = auto",
                  "mean proposal length", "steps without speculation"):  # -k auto is the default
        assert label in out


def test_run_json_validates_and_holds_only_generated_ids(cli, qwen_pair, tmp_path):
    target, draft = qwen_pair
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hello world"}\n"The quick brown fox"\n{"text": "日本語"}\n')
    code, out, err = cli("run", target, draft, "--prompt-file", prompts, "--max-new-tokens", 6,
                         "--batch-size", 2, "--json", "-k", 3)
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("run-1"))
    assert document["verdict"] == "padded-compatible" and document["alignment"]["mapping"] == "pad"
    assert [s["prompt"] for s in document["sequences"]] == ["Hello world", "The quick brown fox", "日本語"]
    for sequence in document["sequences"]:
        assert len(sequence["token_ids"]) == 6  # generated ids only, without the prompt
        assert sequence["token_ids"] != sequence["prompt_ids"][: len(sequence["token_ids"])]
    metrics = document["metrics"]
    assert metrics["drafted_tokens"] >= metrics["accepted_tokens"] >= 0
    assert len(metrics["acceptance_by_position"]) == 3
    assert metrics["k"] == 3 and metrics["mean_proposal_length"] <= 3
    assert metrics["generated_tokens"] == 18
    assert [r["generated_tokens"] for r in metrics["rows"]] == [6, 6, 6]
    for row in metrics["rows"]:  # only emitted tokens count, per row
        assert row["generated_tokens"] == row["first_tokens"] + row["verifications"] + row["accepted_tokens"]
    assert sum(r["accepted_tokens"] for r in metrics["rows"]) == metrics["accepted_tokens"]


def test_run_greedy_text_equals_plain_decoding(cli, qwen_pair):
    target, draft = qwen_pair
    outputs = {}
    for method in ("draft", "ngram", "none"):
        argv = ["run", target] + ([draft] if method == "draft" else []) + [
            "--method", method, "--prompt", "Speculative decoding is", "--prompt", "a b a b a b",
            "--max-new-tokens", 10, "--json", "--batch-size", 2]
        code, out, err = cli(*argv)
        assert code == 0, err
        outputs[method] = [s["token_ids"] for s in json.loads(out)["sequences"]]
    assert outputs["draft"] == outputs["none"] == outputs["ngram"]


def test_chat_formats_the_prompt_with_the_target_template(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("run", target, draft, "--prompt", "Hi", "--chat", "--max-new-tokens", 2, "--json")
    assert code == 0, err
    prompt_ids = json.loads(out)["sequences"][0]["prompt_ids"]
    assert prompt_ids[0] == 151644  # <|im_start|>
    assert prompt_ids[-3:] == [151644, 77091, 198]  # <|im_start|>assistant\n


@pytest.fixture(scope="module")
def mistral_model(models, mistral_json):
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}
    return models.model("mistral-v1-32000", rows=32000, tokenizer=mistral_json("v1"), tokenizer_config=config,
                        generation_config={"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None})


def test_incompatible_pair_is_refused_with_its_findings(cli, qwen_pair, mistral_model):
    code, out, err = cli("run", qwen_pair[0], mistral_model, "--prompt", "hello", "--max-new-tokens", 4)
    assert code == 1
    assert "INCOMPATIBLE" in err and "vocab.conflict" in err
    assert err.strip().splitlines()[-1].startswith("error: refused: the pair is incompatible")
    # one refusal: the findings once (above), then one short line that says what to do
    assert err.count("✗ vocab.conflict") == 1, err
    assert err.strip().splitlines()[-1] == ("error: refused: the pair is incompatible; --translate runs it through "
                                            "their shared tokens, --allow-incompatible runs it with raw ids anyway")
    code, out, err = cli("run", qwen_pair[0], mistral_model, "--prompt", "hello", "--max-new-tokens", 4,
                         "--allow-incompatible", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["verdict"] == "incompatible"
    # still lossless: the same tokens as the target alone
    code, plain, _ = cli("run", qwen_pair[0], "--method", "none", "--prompt", "hello", "--max-new-tokens", 4,
                         "--json")
    assert document["sequences"][0]["token_ids"] == json.loads(plain)["sequences"][0]["token_ids"]


@pytest.mark.parametrize("argv, words", [
    (["run", "{target}", "--prompt", "x"], ["--method draft needs a DRAFT"]),
    (["run", "{target}", "{draft}"], ["--prompt"]),
    (["run", "{missing}", "{draft}", "--prompt", "x"], ["missing", "no such file"]),
    (["run", "{tokenizer}", "--method", "none", "--prompt", "x"], ["tokenizer.json", "needs a model directory"]),
    (["run", "{target}", "{draft}", "--prompt", "x", "--device", "cuda:7"], ["--device cuda:7"]),
    (["run", "{target}", "{draft}", "--prompt", "x", "--dtype", "int8"], ["--dtype"]),
    (["run", "{target}", "{draft}", "--prompt-file", "{missing}"], ["prompt file not found"]),
    (["run", "{target}", "{draft}", "--prompt", "x", "--method", "beam"], ["--method must be one of"]),
])
def test_bad_run_input_exits_2_with_one_line(cli, qwen_pair, qwen25_json, tmp_path, argv, words):
    if "cuda:7" in argv and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    values = {"target": qwen_pair[0], "draft": qwen_pair[1], "missing": tmp_path / "missing",
              "tokenizer": qwen25_json}
    code, _, err = cli(*[a.format(**{k: str(v) for k, v in values.items()}) for a in argv])
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for word in words:
        assert word in lines[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_greedy_equals_plain_decoding(cli, qwen_pair):
    target, draft = qwen_pair
    outputs = []
    for method in ("draft", "none"):
        argv = ["run", target] + ([draft] if method == "draft" else []) + [
            "--method", method, "--prompt", "Speculative decoding is", "--max-new-tokens", 16, "--json",
            "--device", "cuda", "--dtype", "float32"]
        code, out, err = cli(*argv)
        assert code == 0, err
        assert json.loads(out)["device"].startswith("cuda")
        outputs.append(json.loads(out)["sequences"][0]["token_ids"])
    assert outputs[0] == outputs[1]


def test_streamed_text_is_the_decoded_output_even_when_a_character_spans_tokens(qwen_pair):
    """One prompt on a terminal streams its text as tokens are accepted; a character whose UTF-8 bytes span two
    byte-level tokens is printed once it is whole, never as a replacement character."""
    import io

    from rich.console import Console

    from vocabcheck import inspect
    from vocabcheck.render.terminal import StreamPrinter

    profile = inspect(str(qwen_pair[0]))
    tokenizer = profile.source.tokenizer
    text = "naïve 🤖 café — 日本語 done"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert any("\ufffd" in tokenizer.decode(ids[:i]) for i in range(1, len(ids))), "some prefix must split a character"
    buffer = io.StringIO()
    printer = StreamPrinter(Console(file=buffer, markup=False), profile)
    for i, token in enumerate(ids):
        printer.on_tokens(0, [token])
        assert "\ufffd" not in buffer.getvalue()
    printer.finish()
    assert buffer.getvalue() == text + "\n"
