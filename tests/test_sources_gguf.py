"""GGUF files: the tokenizer and embedding rows read from the header, and "did this export keep the tokenizer?".

The fixtures are written the way llama.cpp's convert_hf_to_gguf.py writes them, with the `gguf` package: the token
list of the HF tokenizer (padded with ``[PADn]`` to config.vocab_size, as llama.cpp pads it), llama.cpp's token types,
and ``gguf.SpecialVocab`` for the merges, the special token ids, the add-bos flag and the chat template. Embeddings
have the real row counts and a hidden size of 8.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.support.gguf_export import HIDDEN, qwen_gguf, write_gguf
from vocabcheck import compare, inspect
from vocabcheck.errors import InputError, UnsupportedModel
from vocabcheck.sources import open_model
from vocabcheck.sources.gguf import read_header

GGUF_FIXTURES = "gguf-1"


@pytest.fixture(scope="module")
def gguf_dir(fixture_root) -> Path:
    return fixture_root / GGUF_FIXTURES


@pytest.fixture(scope="module")
def qwen_draft_gguf(qwen_pair, gguf_dir) -> Path:
    """Qwen2.5-0.5B as llama.cpp exports it: 151,936 tokens (151,665 + 271 [PADn]), tied, 151,936 rows."""
    return qwen_gguf(qwen_pair[1], gguf_dir / "qwen2.5-0.5b-padded.gguf", pad=True)


@pytest.fixture(scope="module")
def qwen_target_gguf(qwen_pair, gguf_dir) -> Path:
    """Qwen2.5-7B-shaped, exported without padding the token list: 151,665 tokens, untied, 152,064 rows."""
    return qwen_gguf(qwen_pair[0], gguf_dir / "qwen2.5-7b-unpadded.gguf", pad=False)


@pytest.fixture(scope="module")
def mistral_hf(mistral_json, gguf_dir) -> Path:
    """A Mistral-7B-v0.1-like HF directory without weights: tokenizer.model, tokenizer.json, tokenizer_config.json,
    config.json."""
    from tests.support.fixtures import MISTRAL_SPM, mistral_data

    directory = gguf_dir / "mistral-v1-hf"
    if not (directory / "config.json").is_file():
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mistral_data() / MISTRAL_SPM["v1"], directory / "tokenizer.model")
        shutil.copyfile(mistral_json("v1"), directory / "tokenizer.json")
        (directory / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "pad_token": None, "add_bos_token": True, "add_eos_token": False}))
        (directory / "config.json").write_text(json.dumps({
            "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32000,
            "hidden_size": 4096, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}))
    return directory


@pytest.fixture(scope="module")
def mistral_gguf(mistral_hf, gguf_dir) -> Path:
    """Mistral 7B v0.1 as llama.cpp exports a SentencePiece vocabulary: model "llama", pieces, scores, token types."""
    import gguf

    def vocab(writer) -> None:
        spm = gguf.SentencePieceVocab(mistral_hf)
        tokens, scores, types = zip(*spm.all_tokens())
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(list(tokens))
        writer.add_token_scores(list(scores))
        writer.add_token_types(list(types))
        gguf.SpecialVocab(mistral_hf, load_merges=False, n_vocab=len(tokens)).add_to_gguf(writer, quiet=True)

    return write_gguf(gguf_dir / "mistral-7b-v0.1.gguf", "llama", vocab, 32000, tied=False)


# --- reading ------------------------------------------------------------------------------------------------------


def test_header_gives_tokens_types_merges_and_shapes_in_pytorch_order(qwen_draft_gguf, qwen_pair):
    header = read_header(qwen_draft_gguf)
    meta = header.metadata
    assert meta["general.architecture"] == "qwen2" and meta["tokenizer.ggml.model"] == "gpt2"
    tokens = meta["tokenizer.ggml.tokens"]
    assert len(tokens) == 151936 and tokens[151643] == "<|endoftext|>" and tokens[151935] == "[PAD151935]"
    assert len(meta["tokenizer.ggml.merges"]) == 151387
    types = meta["tokenizer.ggml.token_type"]
    assert (types[0], types[151643], types[151657], types[151665]) == (1, 3, 4, 5)  # normal, control, user, unused
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"],
            meta["tokenizer.ggml.padding_token_id"], meta["tokenizer.ggml.add_bos_token"]) == (151643, 151645,
                                                                                              151643, False)
    (embedding,) = header.tensors
    assert embedding.name == "token_embd.weight" and embedding.shape == (151936, HIDDEN)  # GGUF ne = [8, 151936]
    assert embedding.ggml_type == "F16"


def test_inspect_gguf_reads_rows_specials_and_provenance(cli, qwen_target_gguf):
    code, out, err = cli("inspect", str(qwen_target_gguf), "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["kind"] == "gguf"
    assert document["embeddings"] == {"input_rows": 152064, "output_rows": 152064, "input_tensor": "token_embd.weight",
                                      "output_tensor": "output.weight", "tied": False, "hidden_size": HIDDEN,
                                      "source": "tensors"}
    assert document["config_vocab_size"] == 151665  # what llama.cpp reports as n_vocab: the token list
    assert document["tokenizer"]["size"] == 151665 and document["tokenizer"]["merges"] == 151387
    specials = document["special_tokens"]
    assert specials["eos"] == {"content": "<|im_end|>", "id": 151645}
    assert specials["pad"] == {"content": "<|endoftext|>", "id": 151643}
    assert specials["add_bos"] is False and specials["config_add_bos"] is False
    assert document["chat_template"] is True
    assert "tokenizer.ggml.model=gpt2, pre=qwen2" in document["provenance"]["tokenizer"]
    assert document["provenance"]["tensors"] == f"{qwen_target_gguf} (GGUF tensor infos)"


# --- did this export keep the tokenizer? --------------------------------------------------------------------------


def test_padded_qwen_export_keeps_every_id_of_its_hf_original(qwen_draft_gguf, qwen_pair):
    comparison = compare(str(qwen_draft_gguf), str(qwen_pair[1]))
    assert comparison.verdict.value == "padded-compatible"
    assert not [f for f in comparison.findings if f.severity.value == "error"]
    alignment = comparison.alignment
    assert alignment.shared_ids == 151665 and alignment.shared_ranges == ((0, 151665),)
    assert (alignment.target_rows, alignment.draft_rows, alignment.mapping) == (151936, 151936, "same")
    findings = {f.code: f for f in comparison.findings}
    # llama.cpp pads the token list to config.vocab_size: 271 [PADn] names for padding rows, nothing more
    assert findings["vocab.padding-tokens"].details["count"] == 271
    assert comparison.first_divergent_id == 151665
    assert "vocab.target-extends" not in findings and "vocab.draft-extends" not in findings
    # llama.cpp marks added tokens that look like <|...|> as CONTROL: the six FIM/repo tokens become special
    flags = findings["added.flags"].details["tokens"]
    assert [t["content"] for t in flags] == ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                                             "<|repo_name|>", "<|file_sep|>"]
    assert all(t["changed"] == {"special": [True, False]} for t in flags)
    # a GGUF carries no normalizer: Qwen2.5's NFC is gone, and the probe sees the decomposed "é" split differently
    assert "pipeline.normalizer" in findings
    assert findings["probe.encodings"].details["differing"] >= 1


def test_unpadded_export_of_a_7b_against_its_original_is_compatible_with_equal_rows(qwen_target_gguf, qwen_pair):
    comparison = compare(str(qwen_pair[0]), str(qwen_target_gguf), probe=False)
    assert comparison.verdict.value == "padded-compatible"
    assert comparison.first_divergent_id is None  # same 151,665 ids, no placeholders
    assert (comparison.alignment.target_rows, comparison.alignment.draft_rows) == (152064, 152064)
    codes = {f.code for f in comparison.findings}
    assert "vocab.padding-tokens" not in codes and "rows.padded" not in codes


def test_sentencepiece_export_keeps_ids_scores_and_special_tokens(mistral_gguf, mistral_hf):
    comparison = compare(str(mistral_gguf), str(mistral_hf), probe=False)
    assert comparison.verdict.value == "padded-compatible"
    assert comparison.first_divergent_id is None and comparison.alignment.shared_ids == 32000
    gguf_side, hf_side = comparison.target, comparison.draft
    for role in ("bos", "eos", "unk"):
        assert gguf_side.specials.role(role) == hf_side.specials.role(role)
    assert (gguf_side.specials.bos.id, gguf_side.specials.eos.id, gguf_side.specials.unk.id) == (1, 2, 0)
    # the file's add_bos_token flag (from tokenizer_config.json) becomes a post-processor that adds <s>
    assert gguf_side.specials.config_add_bos is True and hf_side.specials.config_add_bos is True
    assert gguf_side.specials.add_bos and gguf_side.tokenizer.prefix_ids == (1,)
    assert gguf_side.embeddings.rows == 32000 and gguf_side.embeddings.tied is False


def test_a_gguf_of_another_tokenizer_is_incompatible(cli, mistral_gguf, qwen_pair):
    code, out, err = cli("compare", str(mistral_gguf), str(qwen_pair[1]), "--json", "--no-probe")
    assert code == 1, err
    document = json.loads(out)
    assert document["verdict"] == "incompatible"
    assert "vocab.conflict" in {f["code"] for f in document["findings"]}


# --- small files: splits, broken headers --------------------------------------------------------------------------


def tiny_vocab(writer) -> None:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = list(bytes_to_unicode().values())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([*alphabet, "Ġt", "he", "Ġthe"])
    writer.add_token_types([1] * (len(alphabet) + 3))
    writer.add_token_merges(["Ġ t", "h e", "Ġt he"])
    writer.add_eos_token_id(0)


@pytest.fixture
def tiny_gguf(tmp_path) -> Path:
    return write_gguf(tmp_path / "tiny.gguf", "qwen2", tiny_vocab, 259, tied=False)


def test_split_gguf_reads_the_tensors_of_every_split(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(tmp_path / "tiny.gguf", "qwen2", split_max_tensors=1)
    writer.add_embedding_length(HIDDEN)
    tiny_vocab(writer)
    writer.add_tensor("token_embd.weight", np.zeros((259, HIDDEN), dtype=np.float32))
    writer.add_tensor("output.weight", np.zeros((259, HIDDEN), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    first, second = tmp_path / "tiny-00001-of-00002.gguf", tmp_path / "tiny-00002-of-00002.gguf"
    assert [t.name for t in read_header(first).tensors] == ["token_embd.weight"]

    profile = inspect(str(first))
    assert (profile.embeddings.input_rows, profile.embeddings.output_rows, profile.embeddings.tied) == (259, 259, False)
    assert profile.source.tensors["output.weight"].file == second.name

    with pytest.raises(UnsupportedModel, match="split 2 of 2"):
        open_model(str(second))
    second.unlink()
    with pytest.raises(Exception, match="split 2 of 2 .* is missing"):
        open_model(str(first))


def test_tiny_gguf_encodes_with_its_merges(tiny_gguf):
    source = open_model(str(tiny_gguf))
    assert source.tokenizer.encode("the the").tokens == ["t", "he", "Ġthe"]  # merges "h e", "Ġ t", "Ġt he"
    assert source.config["tie_word_embeddings"] is False


def lying_array(count: int) -> bytes:
    key = b"general.lies"
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 0, count)


@pytest.mark.parametrize(("cut", "words"), [
    ("tokens", "tokenizer.ggml.tokens"),
    ("tensor-data", "the file is truncated"),
    ("magic", "not a GGUF file"),
])
def test_truncated_and_foreign_files_are_one_line(cli, tmp_path, tiny_gguf, cut, words):
    data = tiny_gguf.read_bytes()
    header = read_header(tiny_gguf)
    if cut == "tokens":
        broken = data[: data.index(b"\xc4\xa0the") + 2]  # in the middle of the token list
    elif cut == "tensor-data":
        broken = data[: header.data_offset + 100]
    else:
        broken = b"GGML" + data[4:]
    path = tmp_path / "broken.gguf"
    path.write_bytes(broken)
    code, out, err = cli("inspect", str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path}: ") and words in err and len(err.splitlines()) == 1


def test_counts_that_run_past_the_end_are_refused_before_reading(tmp_path):
    path = tmp_path / "lying.gguf"
    path.write_bytes(lying_array(2 ** 40))  # gguf.GGUFReader loops forever on this 44-byte file
    with pytest.raises(InputError, match="claims 1,099,511,627,776 elements, more than the file holds"):
        read_header(path)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2 ** 62, 0))
    with pytest.raises(InputError, match="tensors, more than the file can hold"):
        read_header(path)


def test_a_gguf_without_tokenizer_is_refused(tmp_path):
    path = write_gguf(tmp_path / "no-vocab.gguf", "qwen2", lambda writer: None, 16, tied=True)
    with pytest.raises(UnsupportedModel, match="carries no tokenizer"):
        open_model(str(path))


def test_a_tokenizer_transformers_cannot_build_is_named(cli, tmp_path):
    def wordpiece(writer) -> None:
        writer.add_tokenizer_model("bert")
        writer.add_token_list(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"])
        writer.add_token_types([3, 2, 3, 3, 1])

    path = write_gguf(tmp_path / "bert.gguf", "bert", wordpiece, 5, tied=True)
    code, _, err = cli("inspect", str(path))
    assert code == 2
    assert err == f"error: {path}: GGUF tokenizer.ggml.model='bert' is not one transformers can build a tokenizer " \
                  "from\n"
