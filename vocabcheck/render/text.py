"""Plain text that every human-readable view shares.

This module imports nothing from vocabcheck, so that any module may use it.
"""

from __future__ import annotations


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters: longer text is cut and ends with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
