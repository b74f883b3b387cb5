"""The speculative decoder: draft model, n-gram prompt lookup, or plain decoding, for a batch of prompts.

One step: propose up to k tokens per row (draft model or n-gram lookup), verify them with one target forward pass
over [last token, proposals], accept a prefix by the rule in :mod:`vocabcheck.decode.sampling`, and roll both KV
caches back past the first rejection. The draft's probabilities are mapped onto the target's rows as the pair's
:class:`vocabcheck.verdict.Alignment` says: the draft's non-shared rows are dropped, then the vector is padded with
zero rows or cut to the target's rows, and renormalised; that one mapped distribution is what proposals are drawn
from and what acceptance divides by. Target ids beyond the draft's rows reach it as ``draft_substitute_id``.

Greedy decoding (temperature 0) emits exactly the target's argmax chain; sampling emits exactly the target's warped
distribution. The loop syncs with the host once per step, to read how many tokens each row accepted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..verdict import Alignment
from .ngram import NgramIndex
from .sampling import Sampling, acceptance_probability, draw, residual, warp
from .state import KVState

METHODS = ("draft", "ngram", "none")


@dataclass
class Metrics:
    """Counters and timers of one generate call. Times are seconds; ``tpot_ms`` is the mean over rows of
    (finish time - first-token time) / (tokens - 1)."""

    method: str
    k: int
    batch_size: int
    steps: int = 0  # verifications, summed over rows
    verify_passes: int = 0  # target forwards after prefill (one per step, whatever the batch)
    draft_passes: int = 0  # draft forwards after prefill
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    generated: int = 0
    prefill_s: float = 0.0
    draft_s: float = 0.0
    target_s: float = 0.0
    total_s: float = 0.0
    ttft_s: float = 0.0
    row_tpot_s: list[float] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """1 + accepted drafts per verification, as vLLM reports it."""
        return 1.0 + self.accepted / self.steps if self.steps else 1.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def tpot_ms(self) -> float:
        rows = [t for t in self.row_tpot_s if t == t]  # NaN for rows that produced one token
        return 1000.0 * sum(rows) / len(rows) if rows else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.total_s if self.total_s else 0.0

    @property
    def other_s(self) -> float:
        return max(0.0, self.total_s - self.prefill_s - self.draft_s - self.target_s)

    def merge(self, other: Metrics) -> Metrics:
        """The metrics of two runs one after the other (batches of one `run`)."""
        return Metrics(
            method=self.method, k=self.k, batch_size=max(self.batch_size, other.batch_size),
            steps=self.steps + other.steps, drafted=self.drafted + other.drafted,
            verify_passes=self.verify_passes + other.verify_passes,
            draft_passes=self.draft_passes + other.draft_passes,
            accepted=self.accepted + other.accepted,
            drafted_at=[a + b for a, b in zip(self.drafted_at, other.drafted_at)],
            accepted_at=[a + b for a, b in zip(self.accepted_at, other.accepted_at)],
            generated=self.generated + other.generated, prefill_s=self.prefill_s + other.prefill_s,
            draft_s=self.draft_s + other.draft_s, target_s=self.target_s + other.target_s,
            total_s=self.total_s + other.total_s, ttft_s=min(self.ttft_s, other.ttft_s),
            row_tpot_s=self.row_tpot_s + other.row_tpot_s,
        )


@dataclass(frozen=True)
class GeneratedSequence:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    finish_reason: str  # "eos" or "length"


@dataclass(frozen=True)
class Generation:
    sequences: tuple[GeneratedSequence, ...]
    metrics: Metrics
    interrupted: bool = False  # Ctrl-C: what was accepted so far


class _Clock:
    """Wall-clock phases; on CUDA the step's one host sync closes them, so timing adds no sync of its own."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


def generate(target, prompts: Sequence[Sequence[int]], *, method: str = "draft", draft=None,
             alignment: Alignment | None = None, k: int = 4, max_new_tokens: int = 64,
             sampling: Sampling = Sampling(), eos_ids: Sequence[int] = (), seed: int = 0, ngram_min: int = 1,
             ngram_max: int = 3, on_tokens: Callable[[int, list[int]], None] | None = None,
             time_phases: bool | None = None) -> Generation:
    """Generate up to ``max_new_tokens`` tokens after each prompt (lists of target token ids).

    ``method`` is ``"draft"`` (needs ``draft`` and the pair's ``alignment``), ``"ngram"`` or ``"none"``.
    ``on_tokens(row, ids)`` is called with each row's newly accepted tokens as they are accepted.
    ``time_phases`` splits the time between draft and target; it is on by default on the CPU and off on CUDA,
    where it costs a device sync per phase.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    if method == "draft" and (draft is None or alignment is None):
        raise ValueError("the draft method needs a draft model and the pair's alignment")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    k = k if method != "none" else 0
    device = next(target.parameters()).device
    clock = _Clock(device) if (time_phases if time_phases is not None else device.type != "cuda") else None
    generator = torch.Generator(device=device).manual_seed(seed)
    batch = len(prompts)
    metrics = Metrics(method=method, k=k, batch_size=batch, drafted_at=[0] * k, accepted_at=[0] * k)
    mapper = _DraftMapper(alignment, device, draft) if method == "draft" else None

    start = time.perf_counter()
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], device=device)
    real = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    target_state = KVState(target, batch, device)
    with torch.inference_mode():
        logits = target_state.forward(ids, real, keep=1)[:, -1]
        first = _choose(logits, sampling, generator)
        draft_state = None
        if mapper is not None:
            draft_state = KVState(draft, batch, device)
            draft_state.forward(mapper.to_draft(ids), real, keep=1)
        first_ids = first.tolist()
    metrics.prefill_s = metrics.ttft_s = time.perf_counter() - start

    rows = list(range(batch))  # original index of each live row
    outputs: list[list[int]] = [[] for _ in range(batch)]
    finish: list[str | None] = [None] * batch
    finished_at: list[float] = [0.0] * batch
    last = first_ids  # per live row: the newest token, not yet in the target's cache
    pending: list[list[int]] = [[t] for t in first_ids]  # per live row: tokens the draft has not seen yet
    lookups = [NgramIndex(ngram_min, ngram_max) for _ in range(batch)] if method == "ngram" else []
    for row, token in enumerate(first_ids):
        if lookups:
            lookups[row].extend(list(prompts[row]) + [token])
        _emit(outputs, finish, row, [token], eos_ids, max_new_tokens, on_tokens)
        finished_at[row] = time.perf_counter()

    eos_set = set(eos_ids)
    interrupted = False
    try:
        with torch.inference_mode():
            while True:
                live = [i for i, row in enumerate(rows) if finish[row] is None]
                if not live:
                    break
                if len(live) < len(rows):
                    keep = torch.tensor(live, device=device)
                    target_state.keep_rows(keep)
                    if draft_state is not None:
                        draft_state.keep_rows(keep)
                    rows = [rows[i] for i in live]
                    last = [last[i] for i in live]
                    pending = [pending[i] for i in live]
                budget = max(max_new_tokens - len(outputs[row]) for row in rows)
                width_k = min(k, budget - 1)

                # 1. propose
                t0 = clock.now() if clock else 0.0
                q = None
                if method == "draft" and width_k > 0:
                    proposals, q = _draft_proposals(draft_state, mapper, pending, width_k, sampling, generator, device)
                    metrics.draft_passes += width_k
                elif method == "ngram" and width_k > 0:
                    proposals = [lookups[row].propose(width_k) for row in rows]
                else:
                    proposals = [[] for _ in rows]
                t1 = clock.now() if clock else 0.0

                # 2. verify: one target pass over [last, proposals], rows left-padded to the same width
                lengths = [len(p) for p in proposals]
                span = max(lengths) + 1
                chunk = torch.tensor([[0] * (span - 1 - n) + [last[i]] + p for i, (p, n) in
                                      enumerate(zip(proposals, lengths))], device=device)
                chunk_real = torch.tensor([[0] * (span - 1 - n) + [1] * (n + 1) for n in lengths], device=device)
                logits = target_state.forward(chunk, chunk_real, keep=span)
                metrics.verify_passes += 1

                # 3. accept: target logits for proposal j of row i sit at slot (span - 1 - n_i) + j
                count, chosen = _accept(logits, proposals, lengths, span, q, sampling, generator, device)
                count_list, chosen_list = count.tolist(), chosen.tolist()  # the step's one host sync
                t2 = clock.now() if clock else 0.0
                if clock:
                    metrics.draft_s += t1 - t0
                    metrics.target_s += t2 - t1

                # 4. emit and roll back
                now = time.perf_counter()
                target_rejected, draft_rejected = [], []
                for i, row in enumerate(rows):
                    n, proposal = count_list[i], proposals[i]
                    new = proposal[:n] + [chosen_list[i]]
                    metrics.steps += 1
                    metrics.drafted += len(proposal)
                    metrics.accepted += n
                    for j in range(len(proposal)):
                        metrics.drafted_at[j] += 1
                        if j < n:
                            metrics.accepted_at[j] += 1
                    target_rejected.append(len(proposal) - n)
                    if method == "draft":
                        # the draft saw pending + proposal[:-1]; it keeps proposal[:n] and still owes the rest
                        draft_rejected.append(max(0, len(proposal) - 1 - n))
                        owed = pending[i] if not proposal else ([proposal[-1]] if n == len(proposal) else [])
                        pending[i] = owed + [chosen_list[i]]
                    last[i] = chosen_list[i]
                    if lookups:
                        lookups[row].extend(new)
                    _emit(outputs, finish, row, new, eos_set, max_new_tokens, on_tokens)
                    if finish[row] is not None:
                        finished_at[row] = now
                target_state.drop_last(target_rejected)
                if draft_state is not None and draft_rejected:
                    draft_state.drop_last(draft_rejected)

    except KeyboardInterrupt:  # stop where we are: the caller reports what was accepted
        interrupted = True

    end = time.perf_counter()
    metrics.total_s = end - start
    metrics.generated = sum(len(o) for o in outputs)
    metrics.row_tpot_s = [(finished_at[r] - start - metrics.ttft_s) / (len(outputs[r]) - 1)
                          if len(outputs[r]) > 1 else float("nan") for r in range(batch)]
    sequences = tuple(GeneratedSequence(tuple(prompts[r]), tuple(outputs[r]), finish[r] or "length")
                      for r in range(batch))
    return Generation(sequences=sequences, metrics=metrics, interrupted=interrupted)


def _emit(outputs, finish, row, new, eos_ids, max_new_tokens, on_tokens) -> None:
    """Append accepted tokens to a row, stopping at its eos or its budget."""
    kept = []
    for token in new:
        kept.append(token)
        if token in eos_ids:
            finish[row] = "eos"
            break
        if len(outputs[row]) + len(kept) >= max_new_tokens:
            finish[row] = "length"
            break
    outputs[row].extend(kept)
    if on_tokens is not None and kept:
        on_tokens(row, kept)


def _choose(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> torch.Tensor:
    if sampling.greedy:
        return logits.argmax(dim=-1)
    return draw(warp(logits, sampling), generator)


class _DraftMapper:
    """The alignment as tensors: which draft rows keep their probability, and how target ids reach the draft."""

    def __init__(self, alignment: Alignment, device: torch.device, draft):
        self.target_rows = alignment.target_rows
        draft_rows = draft.get_output_embeddings().weight.shape[0]
        if draft_rows != alignment.draft_rows:
            raise ValueError(f"the draft model has {draft_rows} output rows but the alignment says "
                             f"{alignment.draft_rows}")
        keep = alignment.draft_keep_ranges()
        if not keep:
            raise ValueError("the draft shares no ids with the target: nothing it proposes could be accepted")
        bias = torch.full((alignment.draft_rows,), float("-inf"), device=device)
        for a, b in keep:
            bias[a:b] = 0.0
        usable = min(alignment.draft_rows, alignment.target_rows)
        bias = bias[:usable]  # "cut": draft rows beyond the target's are dropped (never shared)
        if alignment.target_rows > usable:  # "pad": zero probability on the target's extra rows
            bias = torch.cat([bias, torch.full((alignment.target_rows - usable,), float("-inf"), device=device)])
        self.bias = bias
        self.usable = usable
        lookup = torch.arange(max(alignment.target_rows, alignment.target_input_rows), device=device)
        for a, b in alignment.substituted_ids():
            lookup[a:b] = alignment.draft_substitute_id
        self.lookup = lookup

    def to_draft(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lookup[ids]

    def logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [..., draft_rows] as masked logits over the target's rows [..., target_rows]."""
        x = draft_logits[..., : self.usable].float()
        if self.target_rows > self.usable:
            x = torch.nn.functional.pad(x, (0, self.target_rows - self.usable))
        return x + self.bias

    def greedy(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """The argmax of :meth:`logits` without building the padded vector (padded rows are -inf anyway)."""
        return (draft_logits[..., : self.usable] + self.bias[: self.usable]).argmax(dim=-1)


def _draft_proposals(state: KVState, mapper: _DraftMapper, pending: list[list[int]], k: int, sampling: Sampling,
                     generator: torch.Generator, device: torch.device):
    """k tokens per row from the draft, and (when sampling) the mapped distributions q they were drawn from."""
    width = max(len(p) for p in pending)
    tokens = torch.tensor([[0] * (width - len(p)) + p for p in pending], device=device)
    real = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in pending], device=device)
    tokens = mapper.to_draft(tokens)
    picks, dists = [], []
    for _ in range(k):
        draft_logits = state.forward(tokens, real, keep=1)[:, -1]
        if sampling.greedy:
            pick = mapper.greedy(draft_logits)
        else:
            q = warp(mapper.logits(draft_logits), sampling)
            pick = draw(q, generator)
            dists.append(q)
        picks.append(pick)
        tokens = mapper.to_draft(pick)[:, None]
        real = torch.ones_like(tokens)
    proposals = torch.stack(picks, dim=1).tolist()
    return proposals, (torch.stack(dists, dim=1) if dists else None)


def _accept(logits: torch.Tensor, proposals: list[list[int]], lengths: list[int], span: int, q, sampling: Sampling,
            generator: torch.Generator, device: torch.device):
    """How many proposals each row accepts, and the token that follows them (correction or bonus)."""
    batch, width = len(proposals), span - 1
    if min(lengths) == width:  # no row is padded (always so for the draft method): the slots are the positions
        target_logits = logits
    else:
        offsets = torch.tensor([span - 1 - n for n in lengths], device=device)
        index = (offsets[:, None] + torch.arange(span, device=device)[None, :]).clamp(max=span - 1)
        target_logits = logits.gather(1, index[:, :, None].expand(-1, -1, logits.shape[-1]))  # [B, span, V]
    proposed = torch.tensor([p + [0] * (width - len(p)) for p in proposals], device=device, dtype=torch.long)
    valid = torch.arange(width, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
    rows = torch.arange(batch, device=device)
    if sampling.greedy:
        best = target_logits.argmax(dim=-1)  # [B, span]
        hits = (best[:, :width] == proposed) & valid
        count = hits.long().cumprod(dim=1).sum(dim=1)
        return count, best[rows, count]
    p = warp(target_logits, sampling)  # [B, span, V]
    p_x = p[:, :width].gather(2, proposed[:, :, None]).squeeze(2)
    if q is not None:  # draft model: q holds the mapped draft distributions, [B, width, V]
        q_x = q.gather(2, proposed[:, :, None]).squeeze(2)
    else:  # n-gram: deterministic proposals, q is a point mass
        q_x = torch.ones_like(p_x)
    u = torch.rand(p_x.shape, generator=generator, device=device)
    hits = (u < acceptance_probability(p_x, q_x.clamp(min=1e-30))) & valid
    count = hits.long().cumprod(dim=1).sum(dim=1)
    p_n = p[rows, count]  # [B, V]: the distribution at the first unaccepted position (or the bonus position)
    q_n = torch.zeros_like(p_n)
    rejected = count < torch.tensor(lengths, device=device)
    if q is not None:
        q_n = torch.where(rejected[:, None], q[rows, count.clamp(max=width - 1)], q_n)
    else:
        point = proposed[rows, count.clamp(max=max(width - 1, 0))] if width else torch.zeros_like(count)
        q_n = torch.where(rejected[:, None], torch.nn.functional.one_hot(point, p_n.shape[-1]).to(p_n.dtype), q_n)
    return count, draw(residual(p_n, q_n), generator)
