"""Models on the Hugging Face hub (issue: sources)."""

from __future__ import annotations

from ..errors import SourceNotFound
from .base import ModelSource


def open_hub(spec: str, *, read_checkpoint: bool = True) -> ModelSource:
    raise SourceNotFound("no such file or directory, and hub ids are not supported yet", spec)
