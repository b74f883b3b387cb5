"""The speculative decoder: draft model, n-gram prompt lookup, or plain decoding, for a batch of prompts.

One step (:func:`speculative_step`): the controller picks the step's width (a fixed k, or ``auto``:
:mod:`vocabcheck.decode.auto.controller`), the proposer (:mod:`vocabcheck.decode.proposers`, built by
:mod:`vocabcheck.decode.factory`) proposes up to that many tokens per row, one target pass verifies
[newest token, proposals] for every row, the acceptance rule accepts a prefix and picks the token after it, the host
reads back what each row emitted (the step's one device-to-host copy), and both KV caches roll back past the first
rejection. Rows that reach eos or their budget leave the batch.

Greedy decoding (temperature 0) emits exactly the target's argmax chain; sampling emits exactly the target's warped
distribution. The draft's probabilities are mapped onto the target's rows by :mod:`vocabcheck.decode.mapping`, and
every attention layout is masked by position (:mod:`vocabcheck.decode.load.layout`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..interrupts import Terminated, signal_of

from ..verdict import Alignment
from .load.cache_check import check_models
from .auto.controller import AdaptiveLength, FixedLength
from .device import Clock, device_to_host, host_to_device
from .factory import check_pair, controller_for, proposer_for
from .cpu.memory import keep_freed_memory
from .metrics import Metrics, RowMetrics
from .result import GeneratedSequence, Generation
from .options import DecodeOptions
from .plain import generate_plain
from .proposers import Outcome, Prefilled, Proposals, Proposer, left_pad
from .sampling import check_drawn, draw, pick_greedy, warp
from .state import KVState
from .translate import Translator
from .verify import accept, emitted_tokens, verify

OnTokens = Callable[[int, list[int]], None]
OnStep = Callable[[int, int, "float | None", int, int], None]
"""Called after each step with what the ``-k auto`` controller is given: the draft forwards, the verified slots, the
step's seconds (None for a call's first step), the live rows and the positions the draft caught up on."""


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
    proposer: Proposer | None
    controller: AdaptiveLength | FixedLength
    rows: list[Row]
    live: list[int]  # index of each live row in ``rows``
    last: torch.Tensor  # [live] the newest token of each live row, not yet in the target's cache
    generator: torch.Generator
    metrics: Metrics
    start: float
    eos: frozenset[int]
    clock: Clock | None = None
    on_tokens: OnTokens | None = None
    on_step: OnStep | None = None
    stamp: float | None = None  # when the previous step ended (None: before the first step)

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
             on_tokens: OnTokens | None = None, generator: torch.Generator | None = None,
             on_step: OnStep | None = None) -> Generation:
    """Generate up to ``options.max_new_tokens`` tokens after each prompt (lists of target token ids).

    The draft method needs ``draft`` and either the pair's ``alignment`` (one tokenizer, rows padded or cut) or a
    ``translator`` (two tokenizers, through their shared tokens). ``on_tokens(row, ids)`` is called with each row's
    newly accepted tokens as they are accepted. ``generator`` is the sampler's random stream (on the target's
    device); a caller that generates in several batches passes one stream to all of them, so that repeated prompts
    get independent samples. Without one, the call seeds its own from ``options.seed``. ``on_step`` sees every step's
    time as the ``-k auto`` controller does (:data:`OnStep`; `predict` prices k with it). Ctrl-C stops the call where
    it is: the result holds what was accepted so far, with ``interrupted`` set.

    A model whose cache vocabcheck's loop cannot drive (its config says so, or the behavioural check on its loaded
    weights, :func:`vocabcheck.decode.load.cache_check.loop_problem`, run once per model object) is refused for
    speculation (:class:`vocabcheck.errors.UnsupportedModel`) and decoded by transformers' own ``generate`` for
    ``method="none"``.
    """
    check_pair(options, draft, alignment, translator)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if check_models((options.method,), target, draft if options.method.needs_draft else None, _where(target),
                    _where(draft)) is not None:  # only plain decoding gets here with a problem
        return generate_plain(target, prompts, options, eos_ids, on_tokens)
    batch = start_batch(target, prompts, options, draft=draft, alignment=alignment, translator=translator,
                        eos_ids=eos_ids, on_tokens=on_tokens, generator=generator, on_step=on_step)
    interrupted, signum = False, 0
    try:
        with torch.inference_mode():
            prefill(batch, prompts)
            while batch.live:
                speculative_step(batch)
    except (KeyboardInterrupt, Terminated) as stop:  # stop where we are: the caller reports what was accepted
        interrupted, signum = True, signal_of(stop)
    batch.metrics.total_s = batch.elapsed()
    batch.controller.finish()
    batch.metrics.kept_state = batch.controller.kept_state
    sequences = tuple(GeneratedSequence(row.prompt, tuple(row.output), row.finish or "length") for row in batch.rows)
    return Generation(sequences=sequences, metrics=batch.metrics, interrupted=interrupted, signum=signum)


def _where(model) -> str | None:
    """What a refusal names: the directory or hub id the model was loaded from, where it was."""
    return getattr(model, "name_or_path", None) or None


def start_batch(target, prompts, options: DecodeOptions, *, draft, alignment, translator, eos_ids,
                on_tokens, generator=None, on_step: OnStep | None = None) -> Batch:
    device = next(target.parameters()).device
    if device.type == "cpu":
        keep_freed_memory()  # a wide step's logits from the heap, not a fresh mapping each step
    timed = options.time_phases if options.time_phases is not None else device.type != "cuda"
    size = len(prompts)
    rows = [Row(tuple(p), RowMetrics()) for p in prompts]
    metrics = Metrics(method=options.method, k=options.k_label, batch_size=size, rows=[r.metrics for r in rows],
                      translated=options.method.needs_draft and translator is not None)
    proposer = proposer_for(options, target, draft=draft, alignment=alignment, translator=translator,
                            rows=metrics.rows, device=device)
    if generator is None:
        generator = torch.Generator(device=device).manual_seed(options.seed)
    return Batch(options=options, target=KVState(target, size, device), proposer=proposer,
                 controller=controller_for(options, target, draft, size), rows=rows,
                 live=list(range(size)), last=torch.zeros(size, dtype=torch.long, device=device),
                 generator=generator, metrics=metrics,
                 start=time.perf_counter(), eos=frozenset(() if options.ignore_eos else eos_ids),
                 clock=Clock(device) if timed else None, on_tokens=on_tokens, on_step=on_step)


def prefill(batch: Batch, prompts: Sequence[Sequence[int]]) -> None:
    """Every prompt through the target (and the proposer), left-padded to the longest; the first token of each
    row."""
    ids, real = left_pad(prompts, batch.last.device)
    logits = batch.target.forward(ids, keep=1, real=real)[:, -1]
    sampling = batch.options.sampling
    first = pick_greedy(logits) if sampling.greedy else draw(warp(logits, sampling), batch.generator)
    first_host = device_to_host(first)
    check_drawn(first_host)
    if batch.proposer is not None:
        batch.proposer.prefill(Prefilled(prompts, ids, real, first, first_host))
    batch.metrics.prefill_s = batch.metrics.ttft_s = at = batch.elapsed()
    batch.last = first
    for index, token in enumerate(first_host):
        batch.rows[index].metrics.record_first(at)
        batch.emit(index, [token])
    drop_finished(batch)


def speculative_step(batch: Batch) -> None:
    """Choose the width, propose, verify, accept, read back, emit, roll back: one step for every live row."""
    options, clock, metrics = batch.options, batch.clock, batch.metrics
    live = len(batch.live)
    rooms = [options.max_new_tokens - len(batch.rows[i].output) for i in batch.live]
    width = choose_width(batch, rooms)
    catch_up = batch.proposer.catch_up() if width and batch.proposer is not None else 0
    t0 = clock.now() if clock else 0.0
    proposals = propose(batch, width)
    t1 = clock.now() if clock else 0.0
    last_host = [batch.rows[i].output[-1] for i in batch.live]
    logits = verify(batch.target, batch.last, last_host, proposals)
    count, chosen = accept(logits, proposals, options.sampling, batch.generator)
    readback = device_to_host(emitted_tokens(proposals, count, chosen))  # the step's one sync
    t2 = clock.now() if clock else 0.0
    at = batch.elapsed()
    count_step(batch, proposals.width)
    if clock:
        metrics.draft_s += t1 - t0
        metrics.target_s += t2 - t1
    count_host = [row[0] for row in readback]
    emitted = []
    for position, index in enumerate(batch.live):
        n = count_host[position]
        kept = batch.emit(index, readback[position][1:n + 2])
        judged, accepted = batch.rows[index].metrics.record_step(proposals.length(position), n, len(kept), at,
                                                                 rooms[position])
        batch.controller.observe_row(position, judged, accepted)
        emitted.append(kept)
    batch.target.rollback(proposals.lengths_on_device() - count,
                          [proposals.length(i) - n for i, n in enumerate(count_host)])
    if batch.proposer is not None:
        batch.proposer.commit(Outcome(proposals, count, count_host, chosen, emitted))
    batch.last = chosen
    drop_finished(batch)
    observe_time(batch, proposals.width, live, batch.elapsed(), catch_up=catch_up)


def choose_width(batch: Batch, rooms: list[int]) -> int:
    """How many tokens this step proposes: what each row can reach (its budget, its proposer), then the
    controller's choice (the largest reach for a fixed k)."""
    limit = min(batch.options.proposals, max(rooms) - 1)
    if batch.proposer is None or limit <= 0:
        return 0
    reach = [min(r, room - 1) for r, room in zip(batch.proposer.reach(limit), rooms)]
    return batch.controller.choose(reach, batch.proposer.forwards_per_position)


def count_step(batch: Batch, width: int) -> None:
    """The step's verification pass, whether it was plain, and the draft forwards it ran, in the call's metrics."""
    metrics = batch.metrics
    metrics.verify_passes += 1
    metrics.plain_steps += width == 0
    metrics.draft_passes += width * (batch.proposer.forwards_per_position if batch.proposer is not None else 0)


def observe_time(batch: Batch, width: int, live: int, at: float, catch_up: int = 0) -> None:
    """The step's time for the controller: from the end of the previous step to the end of this one (its read-back
    and the host's work after it: emitting, rolling back, the proposer's bookkeeping). The first step of a call has
    none (it pays for the prefill's tail): None. ``live``: the rows the step ran; ``catch_up``: the positions its
    draft caught up on (:meth:`Proposer.catch_up`). Which steps are samples for the cost fit is the controller's to
    decide."""
    forwards = width * (batch.proposer.forwards_per_position if batch.proposer is not None else 0)
    seconds = at - batch.stamp if batch.stamp is not None else None
    batch.controller.observe_step(forwards, live * (width + 1), seconds, live, catch_up)
    if batch.on_step is not None:
        batch.on_step(forwards, live * (width + 1), seconds, live, catch_up)
    batch.stamp = at


def propose(batch: Batch, width: int) -> Proposals:
    if batch.proposer is None or width <= 0:
        return Proposals.none(len(batch.live), batch.last.device)
    return batch.proposer.propose(width, batch.options.sampling, batch.generator)


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
    batch.controller.keep_rows(stay)
    if batch.proposer is not None:
        batch.proposer.keep_rows(stay, keep)
