"""The speculative decoder: draft model, n-gram prompt lookup, or plain decoding, for a batch of prompts.

One step (:func:`speculative_step`): the proposer proposes up to k tokens per row, one target pass verifies
[newest token, proposals] for every row, the acceptance rule accepts a prefix and picks the token after it, the host
reads back what each row emitted (the step's one device-to-host copy), and both KV caches roll back past the first
rejection. Rows that reach eos or their budget leave the batch.

Greedy decoding (temperature 0) emits exactly the target's argmax chain; sampling emits exactly the target's warped
distribution. The draft's probabilities are mapped onto the target's rows by :mod:`vocabcheck.decode.mapping`, and
every attention layout is masked by position (:mod:`vocabcheck.decode.layout`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..verdict import Alignment
from .device import Clock, device_to_host, host_to_device
from .layout import rollback_problem
from .mapping import PaddedMapping
from .metrics import Metrics, RowMetrics
from .result import GeneratedSequence, Generation
from .options import DecodeOptions
from .plain import generate_plain
from .proposers import DraftProposer, NgramProposer, Proposals
from .sampling import check_drawn, draw, warp
from .state import KVState
from .translate import TranslatingProposer, Translator
from .verify import accept, emitted_tokens, verify

OnTokens = Callable[[int, list[int]], None]


@dataclass
class Row:
    """One prompt's progress: what it emitted, why it stopped, and its counters."""

    prompt: tuple[int, ...]
    metrics: RowMetrics
    output: list[int] = field(default_factory=list)
    finish: str | None = None

    def emit(self, tokens: Sequence[int], eos: frozenset[int], budget: int) -> list[int]:
        """Append tokens up to and including an eos id or the ``budget``-th token; returns what was appended."""
        kept = []
        for token in tokens:
            kept.append(token)
            if token in eos:
                self.finish = "eos"
                break
            if len(self.output) + len(kept) >= budget:
                self.finish = "length"
                break
        self.output.extend(kept)
        return kept


@dataclass
class Batch:
    """The rows still generating, in the order of the caches' batch axis, and what the step loop shares."""

    options: DecodeOptions
    target: KVState
    proposer: NgramProposer | DraftProposer | None
    rows: list[Row]
    live: list[int]  # index of each live row in ``rows``
    last: torch.Tensor  # [live] the newest token of each live row, not yet in the target's cache
    generator: torch.Generator
    metrics: Metrics
    start: float
    eos: frozenset[int]
    clock: Clock | None = None
    on_tokens: OnTokens | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def emit(self, index: int, tokens: Sequence[int]) -> list[int]:
        check_drawn(tokens)
        kept = self.rows[index].emit(tokens, self.eos, self.options.max_new_tokens)
        if kept and self.on_tokens is not None:
            self.on_tokens(index, kept)
        return kept


def generate(target, prompts: Sequence[Sequence[int]], options: DecodeOptions = DecodeOptions(), *, draft=None,
             alignment: Alignment | None = None, translator: Translator | None = None, eos_ids: Sequence[int] = (),
             on_tokens: OnTokens | None = None) -> Generation:
    """Generate up to ``options.max_new_tokens`` tokens after each prompt (lists of target token ids).

    The draft method needs ``draft`` and either the pair's ``alignment`` (one tokenizer, rows padded or cut) or a
    ``translator`` (two tokenizers, through their shared tokens). ``on_tokens(row, ids)`` is called with each row's
    newly accepted tokens as they are accepted. Ctrl-C stops the call where it is: the result holds what was
    accepted so far, with ``interrupted`` set.
    """
    if options.method == "draft" and (draft is None or (alignment is None) == (translator is None)):
        raise ValueError("the draft method needs a draft model and either the pair's alignment or a translator")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if not options.speculative and rollback_problem(target.config, type(target)) is not None:
        return generate_plain(target, prompts, options, eos_ids, on_tokens)
    batch = start_batch(target, prompts, options, draft=draft, alignment=alignment, translator=translator,
                        eos_ids=eos_ids, on_tokens=on_tokens)
    interrupted = False
    try:
        with torch.inference_mode():
            prefill(batch, prompts)
            while batch.live:
                speculative_step(batch)
    except KeyboardInterrupt:  # stop where we are: the caller reports what was accepted
        interrupted = True
    batch.metrics.total_s = batch.elapsed()
    sequences = tuple(GeneratedSequence(row.prompt, tuple(row.output), row.finish or "length") for row in batch.rows)
    return Generation(sequences=sequences, metrics=batch.metrics, interrupted=interrupted)


def start_batch(target, prompts, options: DecodeOptions, *, draft, alignment, translator, eos_ids,
                on_tokens) -> Batch:
    device = next(target.parameters()).device
    timed = options.time_phases if options.time_phases is not None else device.type != "cuda"
    size = len(prompts)
    rows = [Row(tuple(p), RowMetrics()) for p in prompts]
    metrics = Metrics(method=options.method, k=options.proposals, batch_size=size, rows=[r.metrics for r in rows],
                      translated=options.method == "draft" and translator is not None)
    proposer = None
    if options.method == "draft" and translator is not None:
        proposer = TranslatingProposer(draft, translator, metrics.rows,
                                       target.get_output_embeddings().weight.shape[0], device)
    elif options.method == "draft":
        proposer = DraftProposer(draft, PaddedMapping(alignment, draft, device), size, device)
    return Batch(options=options, target=KVState(target, size, device), proposer=proposer, rows=rows,
                 live=list(range(size)), last=torch.zeros(size, dtype=torch.long, device=device),
                 generator=torch.Generator(device=device).manual_seed(options.seed), metrics=metrics,
                 start=time.perf_counter(), eos=frozenset(() if options.ignore_eos else eos_ids),
                 clock=Clock(device) if timed else None, on_tokens=on_tokens)


def prefill(batch: Batch, prompts: Sequence[Sequence[int]]) -> None:
    """Every prompt through the target (and the draft), left-padded to the longest; the first token of each row."""
    device = batch.last.device
    width = max(len(p) for p in prompts)
    ids = host_to_device([[0] * (width - len(p)) + list(p) for p in prompts], device)
    real = None
    if any(len(p) < width for p in prompts):
        real = host_to_device([[False] * (width - len(p)) + [True] * len(p) for p in prompts], device,
                              dtype=torch.bool)
    logits = batch.target.forward(ids, keep=1, real=real)[:, -1]
    sampling = batch.options.sampling
    first = logits.argmax(dim=-1) if sampling.greedy else draw(warp(logits, sampling), batch.generator)
    first_host = device_to_host(first)
    check_drawn(first_host)
    if isinstance(batch.proposer, DraftProposer):
        batch.proposer.prefill(prompts, ids, real, first, first_host)
    batch.metrics.prefill_s = batch.metrics.ttft_s = at = batch.elapsed()
    batch.last = first
    for index, token in enumerate(first_host):
        batch.rows[index].metrics.record_first(at)
        batch.emit(index, [token])
    if batch.options.method == "ngram":
        batch.proposer = NgramProposer([list(p) + [t] for p, t in zip(prompts, first_host)],
                                       batch.options.ngram_min, batch.options.ngram_max, device)
    drop_finished(batch)


def speculative_step(batch: Batch) -> None:
    """Propose, verify, accept, read back, emit, roll back: one step for every live row."""
    options, clock, metrics = batch.options, batch.clock, batch.metrics
    budget = max(options.max_new_tokens - len(batch.rows[i].output) for i in batch.live)
    width = min(options.proposals, budget - 1)
    t0 = clock.now() if clock else 0.0
    proposals = propose(batch, width)
    t1 = clock.now() if clock else 0.0
    last_host = [batch.rows[i].output[-1] for i in batch.live]
    logits = verify(batch.target, batch.last, last_host, proposals)
    count, chosen = accept(logits, proposals, options.sampling, batch.generator)
    readback = device_to_host(emitted_tokens(proposals, count, chosen))  # the step's one sync
    t2 = clock.now() if clock else 0.0
    metrics.verify_passes += 1
    if clock:
        metrics.draft_s += t1 - t0
        metrics.target_s += t2 - t1
    count_host = [row[0] for row in readback]
    at = batch.elapsed()
    emitted = []
    for position, index in enumerate(batch.live):
        n = count_host[position]
        kept = batch.emit(index, readback[position][1:n + 2])
        batch.rows[index].metrics.record_step(proposals.length(position), n, len(kept), at)
        emitted.append(kept)
    batch.target.rollback(proposals.lengths_on_device() - count,
                          [proposals.length(i) - n for i, n in enumerate(count_host)])
    if batch.proposer is not None:
        batch.proposer.commit(emitted, proposals, count, count_host, chosen)
    batch.last = chosen
    drop_finished(batch)


def propose(batch: Batch, width: int) -> Proposals:
    size = len(batch.live)
    if batch.proposer is None or width <= 0:
        return Proposals(tokens=torch.zeros(size, 0, dtype=torch.long, device=batch.last.device))
    proposals = batch.proposer.propose(width, batch.options.sampling, batch.generator)
    if isinstance(batch.proposer, DraftProposer):
        batch.metrics.draft_passes += width
    return proposals


def drop_finished(batch: Batch) -> None:
    """Rows that reached eos or their budget leave the caches' batch axis."""
    stay = [position for position, index in enumerate(batch.live) if batch.rows[index].finish is None]
    if len(stay) == len(batch.live):
        return
    batch.live = [batch.live[position] for position in stay]
    if not stay:
        return
    keep = host_to_device(stay, batch.last.device)
    batch.target.keep_rows(keep)
    batch.last = batch.last[keep]
    if batch.proposer is not None:
        batch.proposer.keep_rows(stay, keep)
