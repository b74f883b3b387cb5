"""Verdicts on real tokenizers and Qwen2.5-shaped checkpoints."""

from __future__ import annotations

import pytest

from vocabcheck import compare, inspect
from vocabcheck.demo import qwen
from vocabcheck.verdict import Verdict


def codes(comparison) -> dict[str, str]:
    return {f.code: f.severity.value for f in comparison.findings}


def test_qwen25_pair_is_padded_compatible_with_a_pad_alignment(qwen_pair):
    target, draft = qwen_pair
    result = compare(str(target), str(draft))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    a = result.alignment
    assert (a.target_rows, a.draft_rows, a.mapping, a.pad_rows) == (152064, 151936, "pad", 128)
    assert a.shared_ranges == ((0, qwen.TOKENIZER_IDS),)
    assert a.shared_ids == 151665
    # Qwen2.5 has no unk token; its pad token <|endoftext|> is what a draft-less id is fed as
    assert a.draft_substitute_id == qwen.ENDOFTEXT
    assert a.substituted_ids() == ((151936, 152064),)  # rows the draft cannot embed
    assert result.first_divergent_id is None
    found = codes(result)
    assert found["rows.padded"] == "info"
    assert found["engine.vocab-size"] == "info"  # engines refuse it on vocab_size
    assert not any(severity == "error" for severity in found.values())
    assert result.target.embeddings.tied is False and result.draft.embeddings.tied is True
    assert result.target.embeddings.output_tensor == "lm_head.weight"
    assert "model.safetensors.index.json" in result.target.provenance["tensors"]
    assert "shards, headers" in result.target.provenance["tensors"]


def test_qwen25_pair_swapped_cuts_the_draft_rows(qwen_pair):
    target, draft = qwen_pair
    result = compare(str(draft), str(target))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    a = result.alignment
    assert (a.target_rows, a.draft_rows, a.mapping, a.cut_rows) == (151936, 152064, "cut", 128)
    assert a.draft_keep_ranges() == ((0, 151665),)
    assert a.substituted_ids() == ()  # the draft embeds every target row


def test_a_model_against_itself_is_identical(qwen_pair):
    target, _ = qwen_pair
    result = compare(str(target), str(target))
    assert result.verdict is Verdict.IDENTICAL
    assert result.alignment.mapping == "same"
    assert result.diff.probe is None  # equal fingerprints: nothing to probe
    assert [f.severity.value for f in result.findings] == ["info"]


def test_bare_tokenizer_files_of_one_tokenizer_are_identical_with_unknown_rows(qwen25_json):
    result = compare(str(qwen25_json), str(qwen25_json))
    assert result.verdict is Verdict.IDENTICAL
    assert result.target.embeddings.source == "unknown"
    assert codes(result)["rows.unknown"] == "info"


def test_qwen_against_mistral_is_incompatible(qwen25_json, mistral_json):
    result = compare(str(qwen25_json), str(mistral_json("v1")))
    assert result.verdict is Verdict.INCOMPATIBLE
    conflict = next(f for f in result.findings if f.code == "vocab.conflict")
    assert conflict.severity.value == "error"
    # id 0 is '!' for Qwen and '<unk>' for Mistral: the message names both
    assert "id 0 is '!' in the target, '<unk>' in the draft" in conflict.message
    assert result.first_divergent_id == 0
    assert result.diff.probe is not None and result.diff.probe.differing > 30


def test_mistral_v1_against_v3_is_incompatible_because_v3_inserts_control_tokens(mistral_json):
    result = compare(str(mistral_json("v3")), str(mistral_json("v1")))
    assert result.verdict is Verdict.INCOMPATIBLE
    # v3 puts [INST] at id 3, where v1 has the byte token <0x00>
    assert result.first_divergent_id == 3
    assert result.target.tokenizer.token(3) == "[INST]"
    assert result.draft.tokenizer.token(3) == "<0x00>"
    assert "vocab.moved" in codes(result)  # '<0x00>' moved from 3 to 771


def test_mistral_v2_against_v3_renames_placeholders_only(mistral_json):
    """v3 gave real names ([IMG], [PREFIX], ...) to ids v2 reserved as [control_N]: ids the v2 model never learned,
    treated like padding rows, not as an incompatibility."""
    result = compare(str(mistral_json("v3")), str(mistral_json("v2")))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    renamed = next(f for f in result.findings if f.code == "vocab.placeholder-renamed")
    assert renamed.severity.value == "warning"
    assert "id 10 is '[IMG]' in the target, '[control_8]' in the draft" in renamed.message
    ids = renamed.details["ids"]
    assert 10 in ids and 11 in ids
    # renamed ids are not shared: the draft's probability there is dropped
    kept = result.alignment.draft_keep_ranges()
    assert not any(start <= 10 < end for start, end in kept)
    assert any(start <= 20000 < end for start, end in kept)
    assert result.alignment.renamed_ids == tuple(ids)


def test_qwen25_against_qwen36_tokenizer(qwen25_json, qwen3_json):
    """Qwen3.5/3.6 re-ranked the byte-level vocabulary: the same strings sit at other ids."""
    result = compare(str(qwen3_json), str(qwen25_json))
    t, d = result.target.tokenizer, result.draft.tokenizer
    differing = [i for i in range(min(t.size, d.size)) if t.token(i) != d.token(i)]
    assert differing, "the two vocabularies differ"
    assert result.first_divergent_id == differing[0]
    assert result.verdict is Verdict.INCOMPATIBLE
    assert codes(result)["vocab.conflict"] == "error"


def test_inspect_reports_the_profile(qwen_pair):
    target, draft = qwen_pair
    profile = inspect(str(target))
    assert profile.tokenizer.model_type == "BPE"
    assert (profile.tokenizer.regular_count, len(profile.tokenizer.added)) == (151643, 22)
    assert sum(t.special for t in profile.tokenizer.added) == 14
    assert profile.specials.eos.content == "<|im_end|>" and profile.specials.eos.id == 151645
    assert profile.specials.pad.id == 151643
    assert profile.specials.bos.id == 151643  # from config.json's bos_token_id; tokenizer_config has none
    assert profile.specials.add_bos is False and profile.specials.config_add_bos is False
    assert profile.generation_eos == (151645, 151643)
    assert profile.config_vocab_size == 152064
    assert (profile.embeddings.input_rows, profile.embeddings.output_rows) == (152064, 152064)
    assert profile.chat_template is not None
    assert inspect(str(draft)).fingerprint == profile.fingerprint


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_mistral_tokenizers_add_bos_through_their_post_processor_or_not(mistral_json, version):
    profile = inspect(str(mistral_json(version)))
    # converted SentencePiece files carry no post-processor: nothing is added around a sequence
    assert profile.tokenizer.prefix_ids == ()
    assert profile.specials.unk.content == "<unk>" and profile.specials.unk.id == 0
