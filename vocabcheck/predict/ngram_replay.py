"""N-gram lookup replayed on the target's continuations: the decoder's own :class:`vocabcheck.decode.ngram.NgramIndex`
over the same context (prompt + the tokens emitted so far) proposes at every position what it would propose at a
step that starts there. Its proposals depend only on that context, never on k, so one replay serves every k."""

from __future__ import annotations

from ..decode.ngram import NgramIndex
from .steps import RowRuns
from .teacher import Chain


def ngram_proposals(chain: Chain, n_min: int, n_max: int, k_max: int) -> list[list[int]]:
    """Per position p of the continuation (index 0 unused: token 0 comes from prefill), the proposals of a step
    starting there, up to ``k_max`` of them."""
    index = NgramIndex(n_min, n_max)
    index.extend(chain.prompt)
    out: list[list[int]] = [[]]
    for p, token in enumerate(chain.tokens):
        index.extend([token])
        if p + 1 < len(chain.tokens):
            out.append(index.propose(k_max))
    return out


def ngram_runs(chain: Chain, proposals: list[list[int]], budget: int) -> RowRuns:
    """The row's runs: proposals available at each position and how many match the continuation in a row."""
    tokens = chain.tokens
    matched = [0]
    for p in range(1, len(tokens)):
        run = 0
        for j, token in enumerate(proposals[p]):
            if p + j >= len(tokens) or tokens[p + j] != token:
                break
            run += 1
        matched.append(run)
    return RowRuns(length=len(tokens), budget=budget, matched=tuple(matched),
                   available=tuple(len(p) for p in proposals))
