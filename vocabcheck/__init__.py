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
    import gc

    from .verdict import judge

    # Two 150k-token tokenizer files parse into millions of objects that form no reference cycles; the cyclic
    # collector would traverse them again and again as they accumulate (~10% of compare's time). Afterwards they
    # go to the oldest generation at once (freeze, then unfreeze), unless the caller froze objects of its own.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return judge(inspect(target), inspect(draft), probe=probe)
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


__all__ = ["__version__", "inspect", "compare"]
