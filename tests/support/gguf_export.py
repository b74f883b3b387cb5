"""GGUF files written the way llama.cpp's convert_hf_to_gguf.py writes them, with the `gguf` package: the token list
of an HF tokenizer (padded with ``[PADn]`` to config.vocab_size, as llama.cpp pads it), llama.cpp's token types, and
``gguf.SpecialVocab`` for the merges, the special token ids, the add-bos flag and the chat template. Embeddings have
the real row counts and a hidden size of :data:`HIDDEN`. Used by the GGUF tests and by the fuzz targets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

HIDDEN = 8


def looks_special(token: str) -> bool:
    """llama.cpp's ``does_token_look_special``: added tokens it marks CONTROL even when HF calls them not special."""
    return token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (token.startswith("<|") and token.endswith("|>")) \
        or (token.startswith("<｜") and token.endswith("｜>")) or (token.startswith("<unused") and token.endswith(">"))


def llama_cpp_vocab(hf_dir: Path, pad: bool) -> tuple[list[str], list[int]]:
    """Tokens and token types as llama.cpp's ``get_vocab_base`` writes them for a GPT-2-style (byte-level) BPE."""
    import gguf

    document = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    regular = {i: t for t, i in document["model"]["vocab"].items()}
    added = {a["id"]: a for a in document["added_tokens"]}
    size = config["vocab_size"] if pad else max([*regular, *added]) + 1
    tokens, types = [], []
    for i in range(size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] or looks_special(added[i]["content"])
                         else gguf.TokenType.USER_DEFINED)
        elif i in regular:
            tokens.append(regular[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    return tokens, types


def write_gguf(path: Path, architecture: str, write_vocab, rows: int, tied: bool) -> Path:
    """Write a GGUF file atomically: metadata from ``write_vocab(writer)``, then the embedding tensors."""
    import gguf

    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    writer = gguf.GGUFWriter(partial, architecture)
    writer.add_block_count(2)
    writer.add_context_length(4096)
    writer.add_embedding_length(HIDDEN)
    write_vocab(writer)
    writer.add_tensor("token_embd.weight", np.zeros((rows, HIDDEN), dtype=np.float16))
    if not tied:
        writer.add_tensor("output.weight", np.zeros((rows, HIDDEN), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, path)
    return path


def qwen_gguf(hf_dir: Path, path: Path, *, pad: bool) -> Path:
    import gguf

    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))

    def vocab(writer) -> None:
        tokens, types = llama_cpp_vocab(hf_dir, pad)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("qwen2")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        gguf.SpecialVocab(hf_dir, load_merges=True, n_vocab=len(tokens)).add_to_gguf(writer, quiet=True)

    return write_gguf(path, "qwen2", vocab, config["vocab_size"], config["tie_word_embeddings"])
