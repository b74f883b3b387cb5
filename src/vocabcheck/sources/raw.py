"""Bare tokenizer files: a SentencePiece model, a tiktoken ranks file, a Mistral Tekken json.

With no checkpoint beside them, row counts are unknown and the report says so.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UnsupportedModel
from . import convert
from .base import ModelSource


def open_sentencepiece(path: Path, spec: str) -> ModelSource:
    return ModelSource(spec=spec, kind="sentencepiece", location=str(path),
                       tokenizer_json=convert.from_sentencepiece(path),
                       provenance={"tokenizer": f"{path} (SentencePiece, converted by transformers)"})


def open_tiktoken(path: Path, spec: str) -> ModelSource:
    raise UnsupportedModel("tiktoken files are not supported yet", path)


def looks_like_tekken(path: Path) -> bool:
    return False


def open_tekken(path: Path, spec: str) -> ModelSource:
    raise UnsupportedModel("Tekken files are not supported yet", path)
