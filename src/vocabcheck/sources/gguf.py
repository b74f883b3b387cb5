"""GGUF files (issue: sources)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UnsupportedModel
from .base import ModelSource


def open_gguf(path: Path, spec: str) -> ModelSource:
    raise UnsupportedModel("GGUF files are not supported yet", path)
