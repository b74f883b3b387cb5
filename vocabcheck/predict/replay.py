"""A proposer replayed over the target's continuations, without the target: where one teacher-forced forward cannot
be exact — a translated draft (:class:`vocabcheck.decode.translate.TranslatingProposer`) keeps its context in its own
tokenization, and what it was fed depends on how earlier steps ended — the decoder's own proposer runs step by step,
and the target's verification is replaced by the continuation itself: greedy acceptance is the run of proposals equal
to the target's tokens. Costs one draft decode per k (no target forward)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..decode.device import host_to_device
from ..decode.metrics import RowMetrics
from ..decode.proposers import Outcome, Prefilled, Proposals, left_pad
from ..decode.sampling import Sampling
from .result import Counts
from .steps import counts_of
from .teacher import Chain

GREEDY = Sampling()


def replayed_counts(make_proposer: Callable[[list[RowMetrics]], object], chains: Sequence[Chain],
                    budgets: Sequence[int], k: int, batch_size: int, device) -> Counts:
    """The counts of a greedy run with k: ``make_proposer(row_metrics)`` builds the decoder's proposer for a batch."""
    metrics = [RowMetrics() for _ in chains]
    with torch.inference_mode():
        for begin in range(0, len(chains), batch_size):
            end = begin + batch_size
            _replay_batch(make_proposer, chains[begin:end], budgets[begin:end], k, metrics[begin:end], device)
    return counts_of(metrics, k)


def _replay_batch(make_proposer, chains: Sequence[Chain], budgets: Sequence[int], k: int,
                  metrics: list[RowMetrics], device) -> None:
    proposer = make_proposer(metrics)
    prompts = [list(c.prompt) for c in chains]
    ids, real = left_pad(prompts, device)
    first = [c.tokens[0] for c in chains]
    proposer.prefill(Prefilled(prompts, ids, real, host_to_device(first, device), first))
    emitted = [1] * len(chains)
    live = _keep(proposer, list(range(len(chains))), [c.tokens for c in chains], emitted)
    generator = torch.Generator(device=device)
    while live:
        width = min(k, max(budgets[i] - emitted[i] for i in live) - 1)
        proposals = proposer.propose(width, GREEDY, generator) if width > 0 else \
            Proposals(tokens=torch.zeros(len(live), 0, dtype=torch.long, device=device))
        picks = proposals.tokens.tolist()
        kept_rows, counts, chosen = [], [], []
        for position, i in enumerate(live):
            tokens, p = chains[i].tokens, emitted[i]
            n = 0
            while n < width and p + n < len(tokens) and picks[position][n] == tokens[p + n]:
                n += 1
            kept = list(tokens[p:p + n + 1])  # eos or the budget may end the row inside its accepted run
            metrics[i].record_step(proposals.length(position), n, len(kept), 0.0, budgets[i] - p)
            emitted[i] += len(kept)
            kept_rows.append(kept)
            counts.append(n)
            chosen.append(tokens[min(p + n, len(tokens) - 1)])
        proposer.commit(Outcome(proposals, host_to_device(counts, device), counts, host_to_device(chosen, device),
                                kept_rows))
        live = _keep(proposer, live, [c.tokens for c in chains], emitted)


def _keep(proposer, live: list[int], tokens, emitted: list[int]) -> list[int]:
    """Rows that finished leave the proposer's batch, as in the engine."""
    stay = [position for position, i in enumerate(live) if emitted[i] < len(tokens[i])]
    if len(stay) != len(live) and stay:
        device = proposer.state.length.device
        proposer.keep_rows(stay, host_to_device(stay, device))
    return [live[position] for position in stay]
