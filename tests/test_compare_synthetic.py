"""Each finding and each verdict class on edge cases built by editing the real Qwen2.5 tokenizer."""

from __future__ import annotations

import json

import pytest

from tests.support.fixtures import add_tokens_at_end, edit_tokenizer, swap_ids
from vocabcheck import compare, inspect
from vocabcheck.demo import qwen
from vocabcheck.verdict import Verdict


def findings(result, code):
    return [f for f in result.findings if f.code == code]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_target_that_extends_the_vocab_at_the_end(tmp_path, qwen25_text):
    extended = write(tmp_path, "extended.json",
                     edit_tokenizer(qwen25_text, add_tokens_at_end(["<think>", "</think>", "<|tool|>"])))
    base = write(tmp_path, "base.json", qwen25_text)
    result = compare(str(extended), str(base))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    [finding] = findings(result, "vocab.target-extends")
    assert finding.severity.value == "warning"
    assert "ids 151665–151667" in finding.message and "'<think>'" in finding.message
    # the draft never proposes them; with no checkpoint the rows are the tokenizers' sizes, so the draft cannot
    # embed them and is fed its substitute
    assert result.alignment.substituted_ids() == ((151665, 151668),)
    assert result.first_divergent_id == 151665

    swapped = compare(str(base), str(extended))
    assert swapped.verdict is Verdict.PADDED_COMPATIBLE
    [finding] = findings(swapped, "vocab.draft-extends")
    assert "their draft probability is dropped" in finding.message
    assert swapped.alignment.draft_keep_ranges() == ((0, 151665),)


def test_same_id_different_strings_is_incompatible_and_named(tmp_path, qwen25_text):
    swapped = write(tmp_path, "swapped.json", edit_tokenizer(qwen25_text, swap_ids("Ġthe", "Ġand")))
    base = write(tmp_path, "base.json", qwen25_text)
    result = compare(str(base), str(swapped))
    assert result.verdict is Verdict.INCOMPATIBLE
    the_id = inspect(str(base)).tokenizer.ids["Ġthe"]
    and_id = inspect(str(base)).tokenizer.ids["Ġand"]
    [conflict] = findings(result, "vocab.conflict")
    assert conflict.details["count"] == 2
    assert f"id {min(the_id, and_id)} is" in conflict.message
    [moved] = findings(result, "vocab.moved")
    assert f"'Ġthe' is id {the_id} in the target, {and_id} in the draft" in moved.message
    assert result.first_divergent_id == min(the_id, and_id)
    assert result.failed()


def test_pipeline_difference_with_equal_vocab_is_a_warning_and_the_probe_measures_it(tmp_path, qwen25_text):
    def drop_nfc(document):
        document["normalizer"] = None

    no_nfc = write(tmp_path, "no-nfc.json", edit_tokenizer(qwen25_text, drop_nfc))
    base = write(tmp_path, "base.json", qwen25_text)
    result = compare(str(base), str(no_nfc))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    [normalizer] = findings(result, "pipeline.normalizer")
    assert normalizer.severity.value == "warning"
    assert "normalizer: {'type': 'NFC'} in the target, None in the draft" in normalizer.message
    [probe] = findings(result, "probe.encodings")
    # the probe corpus holds decomposed 'e\u0301', which only the NFC side composes
    assert probe.severity.value == "warning" and result.diff.probe.differing >= 1
    assert not result.failed() and result.failed(strict=True)
    assert not result.failed(strict=True, allow=("pipeline.normalizer", "probe.encodings"))


def test_merge_order_difference(tmp_path, qwen25_text):
    def swap_first_merges(document):
        merges = document["model"]["merges"]
        merges[0], merges[1] = merges[1], merges[0]

    edited = write(tmp_path, "merges.json", edit_tokenizer(qwen25_text, swap_first_merges))
    result = compare(str(write(tmp_path, "base.json", qwen25_text)), str(edited))
    [merges] = findings(result, "tokenizer.merges")
    assert "same merges in another order" in merges.message and "rank 0" in merges.message
    assert result.verdict is Verdict.PADDED_COMPATIBLE


def test_added_token_flags_and_kind(tmp_path, qwen25_text):
    def unspecial(document):
        for token in document["added_tokens"]:
            if token["content"] == "<|im_start|>":
                token["special"] = False

    edited = write(tmp_path, "flags.json", edit_tokenizer(qwen25_text, unspecial))
    result = compare(str(write(tmp_path, "base.json", qwen25_text)), str(edited))
    [flags] = findings(result, "added.flags")
    assert "id 151644 '<|im_start|>': special True in the target, False in the draft" in flags.message


def test_model_parameter_difference(tmp_path, qwen25_text):
    def byte_fallback(document):
        document["model"]["byte_fallback"] = True

    edited = write(tmp_path, "bf.json", edit_tokenizer(qwen25_text, byte_fallback))
    result = compare(str(write(tmp_path, "base.json", qwen25_text)), str(edited))
    [params] = findings(result, "tokenizer.model-params")
    assert "byte_fallback False in the target, True in the draft" in params.message


def test_post_processor_that_adds_bos(tmp_path, qwen25_text):
    def template(document):
        document["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}},
        }

    edited = write(tmp_path, "bos.json", edit_tokenizer(qwen25_text, template))
    profile = inspect(str(edited))
    assert profile.tokenizer.prefix_ids == (151643,) and profile.specials.add_bos is True
    result = compare(str(write(tmp_path, "base.json", qwen25_text)), str(edited))
    [finding] = findings(result, "special.add-bos")
    assert "adds nothing before a sequence, the draft's '<|endoftext|>' (151643)" in finding.message
    assert findings(result, "pipeline.post-processor")


def _model_with(models, name, **kwargs):
    return models.model(name, rows=kwargs.pop("rows", qwen.ROWS_SMALL), **kwargs)


def test_special_tokens_generation_eos_and_chat_template(models):
    base = _model_with(models, "base-instruct")
    config = qwen.tokenizer_config(instruct=False)
    config["chat_template"] = "{{ messages }}"
    other = _model_with(models, "base-pretrained", tokenizer_config=config,
                        generation_config=qwen.generation_config(instruct=False))
    result = compare(str(base), str(other))
    assert result.verdict is Verdict.PADDED_COMPATIBLE or result.verdict is Verdict.IDENTICAL
    [eos] = findings(result, "special.eos")
    assert "target '<|im_end|>' (id 151645), draft '<|endoftext|>' (id 151643)" in eos.message
    [generation] = findings(result, "generation.eos")
    assert generation.severity.value == "info" and "[151645, 151643]" in generation.message
    [template] = findings(result, "chat-template")
    assert template.severity.value == "info"
    # same tokenizer.json, same rows: the tokenizers are equivalent, so the verdict is identical
    assert result.verdict is Verdict.IDENTICAL
    assert result.failed(strict=True)


def test_tokenizer_that_emits_ids_beyond_the_rows_is_broken(models):
    small = _model_with(models, "too-few-rows", rows=151000)
    result = compare(str(small), str(_model_with(models, "base-instruct")))
    assert result.verdict is Verdict.INCOMPATIBLE
    [overflow] = findings(result, "rows.tokenizer-overflow")
    assert overflow.details == {"side": "target", "rows": 151000, "count": 665, "first_id": 151000}
    assert "id 151000" in overflow.message


def test_config_vocab_size_that_disagrees_with_the_tensors(models, qwen_pair):
    lying = _model_with(models, "config-says-151936", rows=qwen.ROWS_LARGE, tied=False,
                        config_vocab_size=qwen.ROWS_SMALL)
    result = compare(str(lying), str(qwen_pair[1]))
    [mismatch] = findings(result, "rows.config-mismatch")
    assert "vocab_size 151,936 but lm_head.weight has 152,064 rows" in mismatch.message
    # the tensors win: the alignment pads to the real 152,064 rows
    assert result.alignment.target_rows == 152064 and result.alignment.mapping == "pad"
    # what engines see (equal config vocab_size) is not what the tensors say
    assert not findings(result, "engine.vocab-size")


def test_bin_checkpoint_is_read_with_weights_only(tmp_path, qwen25_json):
    import torch

    directory = tmp_path / "bin-model"
    directory.mkdir()
    torch.save({"model.embed_tokens.weight": torch.zeros(151936, 8), "lm_head.weight": torch.zeros(151936, 8)},
               directory / "pytorch_model.bin")
    (directory / "tokenizer.json").write_bytes(qwen25_json.read_bytes())
    (directory / "config.json").write_text(json.dumps({"vocab_size": 151936, "tie_word_embeddings": False}))
    profile = inspect(str(directory))
    assert profile.embeddings.source == "tensors"
    assert (profile.embeddings.input_rows, profile.embeddings.output_rows) == (151936, 151936)
    assert "weights_only" in profile.provenance["tensors"]


@pytest.mark.parametrize("edit", ["pretty", "merges-as-strings", "defaults-omitted", "empty-prefix"])
def test_fingerprint_ignores_serialisation(tmp_path, qwen25_text, edit):
    document = json.loads(qwen25_text)
    if edit == "pretty":
        text = json.dumps(document, indent=4, ensure_ascii=True)
    elif edit == "empty-prefix":  # transformers' builders write "" where tokenizers means none
        document["model"]["continuing_subword_prefix"] = ""
        document["model"]["end_of_word_suffix"] = ""
        text = json.dumps(document)
    elif edit == "merges-as-strings":
        document["model"]["merges"] = [" ".join(m) for m in document["model"]["merges"]]
        text = json.dumps(document)
    else:
        # files written by older tokenizers versions lack fields that newer ones serialise with their defaults
        for key in ("ignore_merges", "fuse_unk", "byte_fallback", "dropout"):
            document["model"].pop(key)
        document["decoder"].pop("use_regex")  # true, the default
        text = json.dumps(document)
    a = inspect(str(write(tmp_path, "a.json", qwen25_text)))
    b = inspect(str(write(tmp_path, "b.json", text)))
    assert a.fingerprint == b.fingerprint
    assert compare(str(tmp_path / "a.json"), str(tmp_path / "b.json")).verdict is Verdict.IDENTICAL


@pytest.mark.parametrize("part", ["vocab", "merges", "added", "normalizer", "decoder"])
def test_fingerprint_changes_with_any_semantic_part(tmp_path, qwen25_text, part):
    def edit(document):
        if part == "vocab":
            vocab = document["model"]["vocab"]  # two ids trade strings; the merges stay buildable
            vocab["Ġthe"], vocab["Ġand"] = vocab["Ġand"], vocab["Ġthe"]
        elif part == "merges":
            document["model"]["merges"].pop()
        elif part == "added":
            document["added_tokens"][-1]["lstrip"] = True
        elif part == "normalizer":
            document["normalizer"] = {"type": "NFKC"}
        else:
            document["decoder"] = {"type": "Fuse"}

    a = inspect(str(write(tmp_path, "a.json", qwen25_text)))
    b = inspect(str(write(tmp_path, "b.json", edit_tokenizer(qwen25_text, edit))))
    assert a.fingerprint != b.fingerprint


def test_unigram_scores(tmp_path):
    from tokenizers import Tokenizer, models as tm

    def unigram(scores):
        tokenizer = Tokenizer(tm.Unigram([("<unk>", 0.0), ("a", scores[0]), ("b", scores[1]), ("ab", scores[2])],
                                         unk_id=0))
        return tokenizer.to_str()

    a = write(tmp_path, "u1.json", unigram([-1.0, -2.0, -0.5]))
    b = write(tmp_path, "u2.json", unigram([-1.0, -2.0, -5.0]))
    result = compare(str(a), str(b))
    [scores] = findings(result, "tokenizer.scores")
    assert "id 3 'ab': -0.5 in the target, -5.0 in the draft" in scores.message
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    assert result.diff.probe.differing >= 0


def test_tokenizer_model_type_difference_with_equal_vocab(tmp_path):
    from tokenizers import Tokenizer, models as tm

    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    a = write(tmp_path, "wl.json", Tokenizer(tm.WordLevel(vocab, unk_token="[UNK]")).to_str())
    b = write(tmp_path, "wp.json", Tokenizer(tm.WordPiece(vocab, unk_token="[UNK]")).to_str())
    result = compare(str(a), str(b))
    [kind] = findings(result, "tokenizer.model-type")
    assert "WordLevel" in kind.message and "WordPiece" in kind.message
    assert result.verdict is Verdict.PADDED_COMPATIBLE


def test_placeholder_padding_tokens_on_one_side_are_padding_rows(tmp_path, qwen25_text):
    """llama.cpp pads a GGUF token list up to vocab_size with [PADn]; those are padding rows, not new tokens."""
    padded = write(tmp_path, "padded.json", edit_tokenizer(
        qwen25_text, add_tokens_at_end([f"[PAD{i}]" for i in range(151665, 151936)], special=False)))
    result = compare(str(write(tmp_path, "base.json", qwen25_text)), str(padded))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    assert not findings(result, "vocab.draft-extends")
    [padding] = findings(result, "vocab.padding-tokens")
    assert padding.severity.value == "info" and padding.details["count"] == 271
    assert "id 151665 '[PAD151665]'" in padding.message
    assert result.alignment.draft_keep_ranges() == ((0, 151665),)
