"""Where proposals come from, behind one interface: :class:`Proposer`.

A proposer is built by :func:`vocabcheck.decode.factory.proposer_for` (the one place that knows the methods) and
driven by the engine in this order, for every batch:

1. ``prefill(start)`` — once, after the target's prefill: the prompts (as the target's left-padded batch) and each
   row's first token (:class:`Prefilled`). A draft model runs its prompt pass here; a lookup builds its index.
2. every step, ``reach(limit)`` — how many tokens each live row could propose now (at most ``limit``): a draft model
   can always propose ``limit``; a prompt lookup only what its match holds. The controller
   (:mod:`vocabcheck.decode.auto.controller`) picks the step's width from it, 0 included.
3. ``propose(width, sampling, generator)`` — only when the width is above 0: up to ``width`` target ids per row as
   :class:`Proposals`, on the device, with no host sync.
4. ``commit(outcome)`` — after the step's one host sync, what the target did (:class:`Outcome`): the proposer keeps
   what was accepted and learns what it has not seen yet (after a step of width 0, a draft model owes the target's
   token and catches up on it, with everything else it skipped, in its next proposal pass: no cache recomputation).
5. ``keep_rows(live, rows)`` — rows that finished leave the batch (positions on the host, indices on the device).

``forwards_per_position`` says what a proposal costs in model passes: a draft model runs one forward of the whole
batch per proposed position (1), a lookup none (0); ``backlog()`` how many positions its next proposal pass feeds
before it proposes (what it has not seen yet: 1 or 2 after a proposing step, one more per plain step since; 0 for a
lookup), which the controller's cost fit needs to tell a probe's catch-up from what its width costs. Adding a
proposer: a class with these six methods and that attribute, one line in the factory, and its tests
(CONTRIBUTING.md, "Adding a proposer").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from .device import host_to_device
from .ngram import NgramIndex
from .sampling import NO_TOKEN, Sampling, draw, warp
from .state import KVState


def left_pad(rows: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows of ids of different lengths as one left-padded [B, width] tensor (padding id 0) on ``device``, and which
    of its slots are real ([B, width] bool; None where every row fills the width)."""
    width = max(len(r) for r in rows)
    tokens = host_to_device([[0] * (width - len(r)) + list(r) for r in rows], device, shape=(len(rows), width))
    if all(len(r) == width for r in rows):
        return tokens, None
    real = host_to_device([[False] * (width - len(r)) + [True] * len(r) for r in rows], device, dtype=torch.bool)
    return tokens, real


@dataclass(frozen=True)
class Proposals:
    """``tokens`` [B, width] target ids on the device, left-aligned (proposal j of a row in column j).
    ``lengths`` is each row's count of real proposals (the rest of its columns are padding), None when every row
    has ``width``. ``q`` [B, width, V] holds the distributions sampled proposals were drawn from (None for greedy
    drafts and for n-gram proposals, whose q is a point mass). ``host`` holds the tokens where the host made them."""

    tokens: torch.Tensor
    lengths: list[int] | None = None
    q: torch.Tensor | None = None
    host: list[list[int]] | None = None
    device_lengths: torch.Tensor | None = None  # ``lengths`` on the device, where they are given
    # [B] bool on the device: the row's draft gave a distribution that is not finite, and its proposals from there on
    # are a placeholder id; the step's read-back says so (verify.emitted_tokens) and the engine refuses it
    not_finite: torch.Tensor | None = None

    @staticmethod
    def none(rows: int, device: torch.device) -> Proposals:
        """A step of width 0: nothing proposed, a plain decoding step."""
        return Proposals(tokens=torch.zeros(rows, 0, dtype=torch.long, device=device))

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    def lengths_on_device(self) -> torch.Tensor:
        """Each row's count of real proposals, [B], on the tokens' device."""
        if self.device_lengths is not None:
            return self.device_lengths
        return torch.full((self.tokens.shape[0],), self.width, dtype=torch.long, device=self.tokens.device)

    def length(self, row: int) -> int:
        return self.width if self.lengths is None else self.lengths[row]


@dataclass(frozen=True)
class Prefilled:
    """The batch after the target's prefill: the prompts, as ``ids`` [B, width] left-padded (``real`` marks the
    real slots; None: all), and each row's first token on the device and on the host."""

    prompts: Sequence[Sequence[int]]
    ids: torch.Tensor
    real: torch.Tensor | None
    first: torch.Tensor
    first_host: list[int]


@dataclass(frozen=True)
class Outcome:
    """What one verification did: each row's accepted count (device and host), the target's own token after it
    (``chosen``, device), and the tokens each row emitted (host; eos or the budget may cut them short)."""

    proposals: Proposals
    count: torch.Tensor
    count_host: list[int]
    chosen: torch.Tensor
    emitted: list[list[int]]


class Proposer(Protocol):
    """The interface the engine drives (see the module's docstring for the order of the calls)."""

    forwards_per_position: int

    def prefill(self, start: Prefilled) -> None: ...

    def reach(self, limit: int) -> list[int]: ...

    def propose(self, width: int, sampling: Sampling, generator: torch.Generator) -> Proposals: ...

    def commit(self, outcome: Outcome) -> None: ...

    def keep_rows(self, live: list[int], rows: torch.Tensor) -> None: ...

    def backlog(self) -> int: ...

    def catch_up(self) -> int:
        """Positions the next proposal pass feeds beyond the two a proposing step leaves it (its last proposal and
        the target's token): what it catches up on after plain steps, which the step's cost includes."""
        ...


STEP_LEAVES = 2  # positions a proposing step leaves a draft to feed next: its last proposal and the target's token


def beyond_a_step(backlog: int) -> int:
    """A draft's catch-up: what its next pass feeds beyond what any proposing step leaves it."""
    return max(0, backlog - STEP_LEAVES)


class DraftMapping(Protocol):
    """How a draft's vocabulary meets the target's: :class:`vocabcheck.decode.mapping.PaddedMapping` (one
    tokenizer, rows padded or cut) and :class:`vocabcheck.decode.translate.TranslatedMapping` (two tokenizers,
    through their shared tokens)."""

    target_rows: int

    def to_draft(self, ids: torch.Tensor) -> torch.Tensor:
        """Target ids (every proposal is one) as the draft's input ids."""

    def logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [..., draft rows] as float32 logits over the target's rows (-inf where nothing maps)."""

    def greedy(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """The target id of the argmax of :meth:`logits`, without building the whole vector where possible;
        :data:`vocabcheck.decode.sampling.NO_TOKEN` where they are not finite (as :func:`draw` gives)."""


class NgramProposer:
    """Prompt lookup per row: the tokens that followed the latest earlier occurrence of the row's last n tokens."""

    forwards_per_position = 0

    def __init__(self, n_min: int, n_max: int, device: torch.device):
        self.n_min, self.n_max = n_min, n_max
        self.lookups: list[NgramIndex] = []
        self.device = device

    def prefill(self, start: Prefilled) -> None:
        for prompt, token in zip(start.prompts, start.first_host):
            index = NgramIndex(self.n_min, self.n_max)
            index.extend(list(prompt) + [token])
            self.lookups.append(index)

    def reach(self, limit: int) -> list[int]:
        return [len(lookup.propose(limit)) for lookup in self.lookups]

    def propose(self, width: int, sampling: Sampling, generator: torch.Generator) -> Proposals:
        found = [lookup.propose(width) for lookup in self.lookups]
        widest = max(len(p) for p in found)
        padded = [p + [0] * (widest - len(p)) for p in found]
        lengths = [len(p) for p in found]
        tokens = host_to_device(padded, self.device, shape=(len(found), widest))
        if min(lengths) == widest:
            return Proposals(tokens=tokens, host=found)
        return Proposals(tokens=tokens, lengths=lengths, host=found,
                         device_lengths=host_to_device(lengths, self.device))

    def commit(self, outcome: Outcome) -> None:
        for lookup, tokens in zip(self.lookups, outcome.emitted):
            lookup.extend(tokens)

    def keep_rows(self, live: list[int], rows: torch.Tensor) -> None:
        self.lookups = [self.lookups[i] for i in live]

    def backlog(self) -> int:
        return 0  # a lookup reads the rows' tokens as they are emitted

    def catch_up(self) -> int:
        return 0


class DraftProposer:
    """A draft model whose distributions the mapping turns into distributions over the target's rows. Its cache
    runs in lockstep with the target's and is rolled back past the first rejection; what it has not seen yet waits in
    ``pending`` and goes in with its next proposal pass."""

    forwards_per_position = 1

    def __init__(self, draft, mapping: DraftMapping, batch: int, device: torch.device):
        self.state = KVState(draft, batch, device)
        self.mapping = mapping
        self.pending: torch.Tensor | None = None  # [B, P] draft ids the draft has not seen yet (left-padded)
        self.pending_real: torch.Tensor | None = None  # which of them are real; None: all

    def prefill(self, start: Prefilled) -> None:
        """The prompts and the first token are owed: the draft reads them in its first proposal pass, so a call
        that never proposes (a pair ``-k auto`` has found cannot pay) never pays for the draft's prefill (on a pair
        whose draft costs a target step, 2 % of a batch-1 call of 64 tokens per prompt)."""
        first = self.mapping.to_draft(start.first[:, None])
        self.pending = torch.cat([self.mapping.to_draft(start.ids), first], dim=1)
        self.pending_real = None if start.real is None else torch.cat(
            [start.real.bool(), torch.ones_like(first, dtype=torch.bool)], dim=1)

    def reach(self, limit: int) -> list[int]:
        return [limit] * self.state.real.shape[0]

    def _unseen(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the draft must be fed before it proposes: [B, P] ids and which are real."""
        return self.pending, self.pending_real

    def propose(self, width: int, sampling: Sampling, generator: torch.Generator) -> Proposals:
        """``width`` proposals per row. A distribution that is not finite gives NO_TOKEN, which no embedding holds:
        it becomes id 0 on the device (fed to the draft, verified by the target, never emitted) and the row is marked
        ``not_finite``, which the step's one read-back carries to the host (no sync here)."""
        tokens, real = self._unseen()
        picks, dists, not_finite = [], [], None
        for _ in range(width):
            draft_logits = self.state.forward(tokens, keep=1, real=real)[:, -1]
            if sampling.greedy:
                pick = self.mapping.greedy(draft_logits)
            else:
                q = warp(self.mapping.logits(draft_logits), sampling)
                pick = draw(q, generator)
                dists.append(q)
            missing = pick == NO_TOKEN
            not_finite = missing if not_finite is None else not_finite | missing
            pick = pick.clamp(min=0)
            picks.append(pick)
            tokens, real = self.mapping.to_draft(pick[:, None]), None
        return Proposals(tokens=torch.stack(picks, dim=1), q=torch.stack(dists, dim=1) if dists else None,
                         not_finite=not_finite)

    def commit(self, outcome: Outcome) -> None:
        """The draft saw its pending tokens and all proposals but the last: it keeps the accepted ones and owes the
        rest — the last proposal where all were accepted — and the target's token. After a step of width 0 it saw
        nothing: the target's token joins what it already owed."""
        width, count, count_host = outcome.proposals.width, outcome.count, outcome.count_host
        owed = self.mapping.to_draft(outcome.chosen[:, None])
        if width == 0:
            self.pending = torch.cat([self.pending, owed], dim=1)
            if self.pending_real is not None:
                self.pending_real = torch.cat([self.pending_real, torch.ones_like(owed, dtype=torch.bool)], dim=1)
            return
        self.state.rollback((width - 1 - count).clamp(min=0), [max(0, width - 1 - n) for n in count_host])
        full = [n == width for n in count_host]
        if not any(full):
            self.pending, self.pending_real = owed, None
            return
        self.pending = torch.cat([self.mapping.to_draft(outcome.proposals.tokens[:, -1:]), owed], dim=1)
        accepted_all = count == width
        self.pending_real = None if all(full) else torch.stack([accepted_all, torch.ones_like(accepted_all)], dim=1)

    def keep_rows(self, live: list[int], rows: torch.Tensor) -> None:
        self.state.keep_rows(rows)
        self.pending = self.pending[rows]
        self.pending_real = None if self.pending_real is None else self.pending_real[rows]

    def backlog(self) -> int:
        """Positions the next proposal pass feeds before its first proposal (the pending tokens' width: a shape,
        no sync)."""
        return self.pending.shape[1]

    def catch_up(self) -> int:
        return beyond_a_step(self.backlog())
