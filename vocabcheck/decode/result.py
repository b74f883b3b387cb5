"""What a generate call returns: each row's tokens and why it stopped, and the metrics."""

from __future__ import annotations

from dataclasses import dataclass

from .metrics import Metrics


@dataclass(frozen=True)
class GeneratedSequence:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    finish_reason: str  # "eos" or "length"


@dataclass(frozen=True)
class Generation:
    sequences: tuple[GeneratedSequence, ...]
    metrics: Metrics
    interrupted: bool = False  # Ctrl-C, SIGTERM or SIGHUP: what was accepted so far
    signum: int = 0  # the signal that stopped it (interrupted)
