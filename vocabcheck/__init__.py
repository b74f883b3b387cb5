"""vocabcheck: do a draft and a target model give every token id the same meaning?

The pipeline, one module per idea::

    sources (where files come from) -> profile (what one model is) -> diff (findings between two profiles)
    -> verdict (identical / padded-compatible / incompatible, and the alignment) -> render (terminal, JSON, ...)

The decoder (:mod:`vocabcheck.decode`) consumes the alignment. :func:`compare` and :func:`inspect` live in
:mod:`vocabcheck.check`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .check import compare, inspect  # noqa: E402  (after the version: the command line reads it alone)


__all__ = ["__version__", "inspect", "compare"]
