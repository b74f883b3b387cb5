"""vocabcheck: do a draft and a target model give every token id the same meaning?

The pipeline, one module per idea::

    sources (where files come from) -> profile (what one model is) -> diff (findings between two profiles)
    -> verdict (identical / padded-compatible / incompatible, and the alignment) -> render (terminal, JSON, ...)

The decoder (:mod:`vocabcheck.decode`) consumes the alignment.
"""

from __future__ import annotations

__version__ = "0.1.0"


def inspect(spec: str):
    """Profile one model (a directory, a tokenizer file, a hub id or a GGUF file)."""
    from .profile import build_profile
    from .sources import open_model

    return build_profile(open_model(spec))


def compare(target: str, draft: str, *, probe: bool = True):
    """Compare a target and a draft model; returns a :class:`vocabcheck.verdict.Comparison`."""
    from .verdict import judge

    return judge(inspect(target), inspect(draft), probe=probe)


__all__ = ["__version__", "inspect", "compare"]
