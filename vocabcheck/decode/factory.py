"""The one place that turns a method and a pair into a proposer and a proposal-length controller.

:class:`vocabcheck.methods.Method` says what each method is and needs; :data:`PROPOSERS` says what each one builds. The engine
only ever sees a :class:`vocabcheck.decode.proposers.Proposer` (or None for plain decoding) and a controller.
"""

from __future__ import annotations

import torch

from ..methods import Method
from ..verdict import Alignment
from .auto.controller import AdaptiveLength, FixedLength
from .auto.costs import costs_for
from .cpu.head import unsettled_calls
from .mapping import PaddedMapping
from .metrics import RowMetrics
from .options import DecodeOptions
from .proposers import DraftProposer, NgramProposer, Proposer
from .translate import TranslatingProposer, Translator


def check_pair(options: DecodeOptions, draft, alignment: Alignment | None, translator: Translator | None) -> None:
    """What each method needs, before anything runs."""
    if options.method.needs_draft and (draft is None or (alignment is None) == (translator is None)):
        raise ValueError("the draft method needs a draft model and either the pair's alignment or a translator")


def proposer_for(options: DecodeOptions, target, *, draft, alignment: Alignment | None,
                 translator: Translator | None, rows: list[RowMetrics], device: torch.device) -> Proposer | None:
    """The proposer of ``options.method`` for a batch of ``len(rows)`` prompts: a draft model (padded or translated
    mapping), a prompt lookup, or None (plain decoding)."""
    build = PROPOSERS.get(options.method)
    return build(options, target, draft, alignment, translator, rows, device) if build is not None else None


def _ngram(options, target, draft, alignment, translator, rows, device) -> Proposer:
    return NgramProposer(options.ngram_min, options.ngram_max, device)


def _draft(options, target, draft, alignment, translator, rows, device) -> Proposer:
    if translator is not None:
        return TranslatingProposer(draft, translator, rows, target.get_output_embeddings().weight.shape[0], device)
    return DraftProposer(draft, PaddedMapping(alignment, draft, device), len(rows), device)


PROPOSERS = {Method.NGRAM: _ngram, Method.DRAFT: _draft}
"""What each proposing method builds for a batch (plain decoding builds nothing)."""


def controller_for(options: DecodeOptions, target, draft, rows: int) -> AdaptiveLength | FixedLength:
    """``k="auto"``: the adaptive controller with the costs this pair and method measured so far in this process;
    a fixed k otherwise."""
    if not options.adaptive:
        return FixedLength()
    key = f"{options.method}/{'greedy' if options.sampling.greedy else 'sampled'}"
    return AdaptiveLength(rows, options.k_max, costs_for(target, draft if options.method.needs_draft else None, key,
                                                           rows, options.k_max), unsettled=unsettled_calls)
