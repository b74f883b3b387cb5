"""How the translated draft is fed text the target produced: ordinary draft tokens, never `<0xNN>` byte tokens where
an ordinary token stands for the same bytes; the draft's own tokenization of a fragment; a shared target token always
as its one-to-one counterpart; and always exactly the bytes the target emitted. (Output never depends on it —
tests/test_translate_decode.py — acceptance does: `python -m benchmarks.reencoding`.)"""

from __future__ import annotations

import pytest

from vocabcheck import compare
from vocabcheck.decode.metrics import RowMetrics
from vocabcheck.decode.translate import RowContext, Translator, prompt_ids

TEXTS = ["The quick brown fox jumps over the lazy dog.", "def fibonacci(n):\n    return", "fox, fix, fax. Fox! (box)",
         "Q: What is 2 + 2?\nA:", "Größe, naïve café — 日本語 🤖 done", "x = [i ** 2 for i in range(10)]  # squares"]


def translator(target_json, draft_json):
    comparison = compare(str(target_json), str(draft_json))
    return comparison, Translator(comparison.translation, comparison.draft.source.tokenizer,
                                  comparison.target.tokenizer.tokens)


@pytest.fixture(scope="module")
def v3_for_v1(mistral_json):
    """Mistral v3 target, v1 draft: the same 32,000 strings (v3 puts 768 control tokens first), so the draft can be
    fed every target token one to one."""
    return translator(mistral_json("v3"), mistral_json("v1"))


def draft_tokens(comparison, ids):
    return [comparison.draft.source.tokenizer.id_to_token(i) for i in ids]


def test_bytes_re_encode_to_ordinary_tokens_not_byte_tokens(v3_for_v1):
    """Before: `.` became `<0x2E>` and `fox` became `▁fo <0x78>`."""
    comparison, t = v3_for_v1
    assert draft_tokens(comparison, t.split(b".")) == ["."]
    assert draft_tokens(comparison, t.encode(".")) == ["."]
    # the draft's own tokens for a fragment (as its tokenizer writes it after other text), not a greedy split
    assert draft_tokens(comparison, t.encode("fox")) == ["fox"]
    assert draft_tokens(comparison, t.encode(" fox")) == ["▁f", "ox"]
    for text in TEXTS[:4]:
        ids = t.encode(text)
        assert comparison.translation.draft_bytes(ids) == text.encode("utf-8")
        byte_tokens = {token for token in draft_tokens(comparison, ids) if token.startswith("<0x")}
        assert byte_tokens <= {"<0x0A>"}, text  # a line break: Mistral has no ordinary token for it


def test_a_prompt_of_shared_tokens_reaches_the_draft_one_to_one(v3_for_v1):
    comparison, t = v3_for_v1
    tokenizer = comparison.target.source.tokenizer
    for text in TEXTS:
        prompt = tokenizer.encode(text).ids
        assert all(token in t.direct for token in prompt), text
        assert prompt_ids(t, prompt) == [t.direct[token] for token in prompt], text


def test_a_shared_token_after_half_a_character_is_fed_as_itself_with_the_targets_bytes(qwen25_json, mistral_json):
    """Qwen's byte-level tokens hold pieces of characters that no Mistral token stands for. Before: the half
    character and the shared `.` after it were decoded together into '\\ufffd.' and re-encoded — bytes the target
    never emitted, and `.` as `<0x2E>`."""
    comparison, t = translator(qwen25_json, mistral_json("v1"))
    table = comparison.translation.intersection.target.table
    half = next(i for i, value in enumerate(table) if value == b"\xe6\x97")  # the first two bytes of 日
    rest = next(i for i, value in enumerate(table) if value == b"\xa5")
    dot = next(i for i, value in enumerate(table) if value == b".")
    assert half not in t.direct and dot in t.direct  # (the lone byte A5 is shared: Mistral's <0xA5>)
    row = RowContext(t, RowMetrics())
    fed = row.feed([half, dot])
    assert comparison.translation.draft_bytes(fed) == b"\xe6\x97."
    assert fed[-1] == t.direct[dot] and draft_tokens(comparison, fed)[-1] == "."
    # a character completed by the next step is held until then, and fed as the character, not as byte tokens
    assert row.feed([half]) == []
    fed = row.feed([rest, dot])
    assert draft_tokens(comparison, fed) == ["日", "."]
    assert row.metrics.reencodings == 2
