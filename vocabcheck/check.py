"""The library's two entry points: :func:`inspect` profiles one model, :func:`compare` profiles a pair and judges it.

Every caller that turns a spec (a directory, a tokenizer file, a hub id, a GGUF file) into a comparison goes through
:func:`compare` (the CLI's ``compare`` and ``run``, the benchmark), and every caller that needs one model's profile
through :func:`vocabcheck.profile.profile_of`. Both are importable from the package: ``vocabcheck.compare``.

The imports are inside the functions: ``import vocabcheck`` stays cheap for the command line's startup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .profile import ModelProfile
    from .verdict import Comparison


def inspect(spec: str) -> ModelProfile:
    """Profile one model (a directory, a tokenizer file, a hub id or a GGUF file)."""
    from .profile import profile_of

    return profile_of(spec)


def compare(target: str, draft: str, *, probe: bool = True) -> Comparison:
    """Compare a target and a draft model; returns a :class:`vocabcheck.verdict.Comparison`."""
    import gc
    from functools import partial

    from .probe import corpus_in_background
    from .profile import build_profile
    from .sources import open_model
    from .tokenizer import check_merges
    from .verdict import judge

    # Two 150k-token tokenizer files parse into millions of objects that form no reference cycles; the cyclic
    # collector would traverse them again and again as they accumulate (~10% of compare's time). Afterwards they
    # go to the oldest generation at once (freeze, then unfreeze), unless the caller froze objects of its own.
    # Where the two tokenizer files differ, the probe's encodings are made in worker processes (vocabcheck.probe)
    # while this one reads both files into profiles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sources = open_model(target), open_model(draft)
        differ = probe and sources[0].tokenizer_json != sources[1].tokenizer_json
        with corpus_in_background(sources if differ else ()) as background:
            profiles = []
            for source in sources:
                # where a worker builds the tokenizer, the library checks its merges there (this process would spend
                # ~0.2 s per 150k merges); only if that fails are they checked here, for the precise error
                worker = background.covers(source)
                profile = build_profile(source, merges_checked_elsewhere=worker)
                if worker:
                    background.check_on_failure(source, partial(check_merges, profile.tokenizer,
                                                                source.tokenizer_where))
                profiles.append(profile)
            return judge(*profiles, probe=probe)
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()
