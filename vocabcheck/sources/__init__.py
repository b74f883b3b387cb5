"""Where a model's files come from: a local directory, a tokenizer file, a hub id, a GGUF file.

:func:`open_model` turns what the user typed into a :class:`ModelSource`, the raw facts that
:func:`vocabcheck.profile.build_profile` reads.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError, SourceNotFound
from .base import ModelSource, TensorShape
from .local import open_directory, open_tokenizer_json

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")
# mistral-common and Mistral's repositories name versioned SentencePiece models tokenizer.model.v3, .v7m1...
SENTENCEPIECE_VERSIONED = re.compile(r"\.model\.v\d+(m\d+)?$")


def open_model(spec: str, *, read_checkpoint: bool = True) -> ModelSource:
    """Open a model from a directory, a tokenizer file, or a hub id (``org/name`` or ``org/name@revision``).

    Raises a :class:`vocabcheck.errors.VocabcheckError` subclass that names the path and the problem.
    """
    spec = str(spec)
    if not spec.strip():
        raise SourceNotFound("empty model path")
    path = Path(spec).expanduser()
    if path.is_dir():
        return open_directory(path, spec, read_checkpoint=read_checkpoint)
    if path.is_file():
        return open_file(path, spec)
    if path.exists():
        raise InputError("not a regular file or directory", path)
    if HUB_ID.match(spec) and not spec.startswith((".", "/", "~")):
        from .hub import open_hub

        return open_hub(spec, read_checkpoint=read_checkpoint)
    raise SourceNotFound("no such file or directory", path)


def open_file(path: Path, spec: str) -> ModelSource:
    """A single file: tokenizer.json, a SentencePiece model, a tiktoken ranks file, a Tekken json, a GGUF file."""
    name = path.name.lower()
    if name.endswith(".gguf"):
        from .gguf import open_gguf

        return open_gguf(path, spec)
    if name.endswith(".model") or SENTENCEPIECE_VERSIONED.search(name):
        from .raw import open_sentencepiece

        return open_sentencepiece(path, spec)
    if name.endswith(".tiktoken"):
        from .raw import open_tiktoken

        return open_tiktoken(path, spec)
    if name.endswith(".json"):
        from .raw import looks_like_tekken, open_tekken

        if looks_like_tekken(path):
            return open_tekken(path, spec)
        return open_tokenizer_json(path, spec)
    raise InputError("unknown file type: expected a model directory, tokenizer.json, a SentencePiece .model, a "
                     ".tiktoken ranks file, a Tekken .json or a .gguf file", path)


__all__ = ["ModelSource", "TensorShape", "open_model", "open_file"]
