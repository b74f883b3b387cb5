"""`run`'s options against the pair and the method: `--translate` applies every other refusal first (a model broken
on its own is refused in one line, exit 2, before anything runs translated), and an option that does nothing in
the chosen method is warned about in one line on stderr — never silently ignored."""

from __future__ import annotations

import json

import pytest

MISTRAL_CONFIG = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}
MISTRAL_GENERATION = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}
PROMPT = ["--prompt", "The quick brown fox", "--max-new-tokens", 5, "--json"]


@pytest.fixture(scope="module")
def overflowing_draft(models, mistral_json):
    """A Mistral v3 tokenizer (32,768 ids) on 32,000 embedding rows: it emits ids its model cannot embed."""
    return models.model("mistral-v3-on-32000-rows", rows=32000, seed=23, hidden=32, tokenizer=mistral_json("v3"),
                        tokenizer_config=MISTRAL_CONFIG, generation_config=MISTRAL_GENERATION)


def warnings_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


@pytest.mark.parametrize("sampling", [[], ["--temperature", "1"]])
def test_translate_refuses_a_draft_broken_on_its_own_in_one_line(cli, qwen_pair, overflowing_draft, sampling):
    """Before: it ran translated and crashed with exit 3 (IndexError; sampled: INDICES element is out of DATA
    bounds)."""
    code, out, err = cli("run", qwen_pair[0], overflowing_draft, "--translate", *PROMPT, *sampling)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {overflowing_draft}: refused: rows.tokenizer-overflow"), err
    assert "draft's tokenizer emits 768 ids" in lines[0]
    assert out == ""


def plain_ids(cli, target) -> list[list[int]]:
    code, out, err = cli("run", target, "--method", "none", *PROMPT)
    assert code == 0, err
    return [s["token_ids"] for s in json.loads(out)["sequences"]]


def test_translate_on_a_compatible_pair_is_warned_about_and_runs_on_the_alignment(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("run", target, draft, "--translate", *PROMPT)
    assert code == 0, err
    assert warnings_of(err) == ["warning: --translate does nothing on this pair (padded-compatible): the tokenizers "
                                "are equivalent; ignored"]
    document = json.loads(out)
    assert document["metrics"].get("translation") is None  # not translated
    assert [s["token_ids"] for s in document["sequences"]] == plain_ids(cli, target)


@pytest.mark.parametrize("method", ["ngram", "none"])
def test_a_draft_and_translate_without_the_draft_method_are_warned_about(cli, qwen_pair, method):
    target, draft = qwen_pair
    code, out, err = cli("run", target, draft, "--method", method, "--translate", *PROMPT)
    assert code == 0, err
    assert warnings_of(err) == [
        f"warning: DRAFT {draft} is not used by --method {method}; ignored",
        f"warning: --translate does nothing with --method {method} (it translates a draft model's proposals); "
        "ignored"]
    assert [s["token_ids"] for s in json.loads(out)["sequences"]] == plain_ids(cli, target)


def test_knobs_of_another_method_or_of_sampling_are_warned_about(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("run", target, draft, "--ngram-max", 5, "--top-k", 8, *PROMPT)
    assert code == 0, err
    assert warnings_of(err) == ["warning: --ngram-min/--ngram-max do nothing with --method draft; ignored",
                                "warning: --top-k/--top-p do nothing in greedy decoding (--temperature 0); ignored"]
    code, out, err = cli("run", target, draft, "--temperature", "0.7", "--top-k", 8, *PROMPT)
    assert code == 0 and warnings_of(err) == [], err
