"""A pair's run on vLLM (:mod:`vocabcheck.engines.vllm` says what maps to what): the session ``run --engine vllm``
uses, the engine loop that times each row as vocabcheck's decoder does, and vLLM's speculative-decoding counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import VocabcheckError
from . import vllm as engine
from .vllm import MIN_MODEL_LEN, NAME, EngineSpec, aligned_draft, engine_k, speculative_config, start, validate


SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos")


def counters(llm) -> dict[str, Any]:
    """vLLM's speculative-decoding counters now (totals since the engine started; per position as a list)."""
    found: dict[str, Any] = {name: 0 for name in SPEC_COUNTERS}
    found[SPEC_COUNTERS[-1]] = []
    for metric in llm.get_metrics():
        if metric.name in SPEC_COUNTERS:
            found[metric.name] = list(metric.values) if hasattr(metric, "values") else int(metric.value)
    return found


def counted(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What one call added to the counters."""
    per_pos = SPEC_COUNTERS[-1]
    then = before[per_pos] + [0] * (len(after[per_pos]) - len(before[per_pos]))
    out = {name: after[name] - before[name] for name in SPEC_COUNTERS[:-1]}
    out[per_pos] = [int(a - b) for a, b in zip(after[per_pos], then)]
    return out


@dataclass
class StepTimes:
    """Per row, as the loop saw it: tokens by step, and when its first and latest tokens came."""

    counts: list[int]
    first_at: float | None = None
    last_at: float = 0.0
    token_ids: tuple[int, ...] = ()
    finish_reason: str = ""


def generate_batch(llm, prompt_ids: Sequence[Sequence[int]], params, on_tokens=None) -> tuple[list[StepTimes], float]:
    """Run one batch through vLLM's engine loop; returns each row's steps and times (seconds since the call
    started) and the call's wall time. ``on_tokens(row, new_ids)`` hears each row's new tokens."""
    engine = llm.llm_engine
    rows = [StepTimes(counts=[]) for _ in prompt_ids]
    started = time.perf_counter()
    for row, ids in enumerate(prompt_ids):
        engine.add_request(str(row), {"prompt_token_ids": list(ids)}, params)
    try:
        while engine.has_unfinished_requests():
            for output in engine.step():
                row = rows[int(output.request_id)]
                completion = output.outputs[0]
                tokens = tuple(completion.token_ids)
                new = len(tokens) - len(row.token_ids)
                if new > 0:
                    now = time.perf_counter() - started
                    row.counts.append(new)
                    row.first_at = now if row.first_at is None else row.first_at
                    row.last_at = now
                    if on_tokens is not None:
                        on_tokens(int(output.request_id), list(tokens[-new:]))
                    row.token_ids = tokens
                if output.finished:
                    row.finish_reason = {"length": "length", "stop": "eos"}.get(completion.finish_reason or "",
                                                                              completion.finish_reason or "")
    except BaseException:
        engine.abort_request([str(row) for row in range(len(prompt_ids))])
        raise
    return rows, time.perf_counter() - started


def timed_steps(llm, prompt_ids: Sequence[Sequence[int]], params, *, count_drafts: bool = True
                ) -> list[tuple[float, int, int | None]]:
    """Run one batch through vLLM's engine loop and time each decode step: (seconds, rows it ran, proposals vLLM
    drafted in it). A step before every row has its first token (the prefill) is no decode step and is left out.

    A step is timed as the engine loop runs it, from the end of the previous step to the end of this one (a call
    that gave no row a token is part of the step after it). Where
    ``count_drafts`` (the width varies: vLLM's n-gram proposer drafts what its lookup found, and vLLM then schedules
    synchronously), the drafted proposals are read from vLLM's ``vllm:spec_decode_num_draft_tokens`` counter between
    steps, and the time the read took is left out. Elsewhere no counter is read (drafted is None: the engine's k,
    which vLLM drafts for every row): where vLLM schedules asynchronously (its default for plain decoding and a draft
    model) work of a step goes on while the counters are read, and leaving the read out under-priced a draft model's
    steps by a fifth."""
    engine = llm.llm_engine
    seen = [0] * len(prompt_ids)
    done = [False] * len(prompt_ids)
    for row, ids in enumerate(prompt_ids):
        engine.add_request(str(row), {"prompt_token_ids": list(ids)}, params)
    drafted = counters(llm)[SPEC_COUNTERS[1]] if count_drafts else 0
    steps: list[tuple[float, int, int | None]] = []
    try:
        mark = time.perf_counter()
        while engine.has_unfinished_requests():
            live = done.count(False)
            decoding = all(seen)
            outputs = engine.step()
            grew = False
            for output in outputs:
                row = int(output.request_id)
                grew = grew or len(output.outputs[0].token_ids) > seen[row]
                seen[row] = len(output.outputs[0].token_ids)
                done[row] = done[row] or output.finished
            if not grew:  # a call that gave no row a token (an asynchronous schedule filling its queue): its time is
                continue  # the next step's
            now = time.perf_counter()
            seconds, mark = now - mark, now
            count = None
            if count_drafts:
                total = counters(llm)[SPEC_COUNTERS[1]]
                count, drafted, mark = int(total - drafted), total, time.perf_counter()
            if decoding and live:
                steps.append((seconds, live, count))
    except BaseException:
        engine.abort_request([str(row) for row in range(len(prompt_ids))])
        raise
    return steps


def sampling_params(options, eos_ids: Sequence[int], room: int):
    """vLLM's SamplingParams for vocabcheck's decode options: the same temperature, top-k (0: off), top-p, seed,
    length budget and stop tokens (the target's generation eos ids; none where the options ignore eos, as bench's
    do)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    sampling = options.sampling
    return SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                          seed=options.seed, max_tokens=room,
                          stop_token_ids=[] if options.ignore_eos else list(eos_ids), ignore_eos=options.ignore_eos,
                          output_kind=RequestOutputKind.CUMULATIVE, skip_special_tokens=True)


def describe_config(config: dict[str, Any] | None) -> str:
    return "none" if config is None else json.dumps(config, separators=(", ", ": "))


# --- a run of the pair on vLLM, with the session's interface -----------------------------------------------------


@dataclass
class VllmSession:
    """A pair judged by vocabcheck and run by vLLM: the same ``generate`` and the same attributes the views read as
    vocabcheck's own :class:`~vocabcheck.decode.session.Session`. The engine starts on the first ``generate`` of
    each (method, k, batch size), since vLLM fixes its speculative config and batch size when it starts."""

    request: Any
    target_profile: Any
    draft_profile: Any
    comparison: Any
    draft_dir: str | None
    dtype: str
    device: str
    debug: bool = False
    engine: str = NAME
    engine_version: str = ""
    notes: tuple[str, ...] = ()
    schedule: tuple | None = None  # num_speculative_tokens_per_batch_size: a served table (bench --served)
    _llm: Any = None  # the vLLM engine, started on the first generate
    _llm_spec: EngineSpec | None = None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self.target_profile.generation_eos

    def config_for(self, options) -> dict[str, Any] | None:
        return speculative_config(options.method, engine_k(options.k), draft_dir=self.draft_dir,
                                  ngram_min=options.ngram_min, ngram_max=options.ngram_max,
                                  per_batch_size=self.schedule if options.method.proposes else None)

    def _engine(self, options, batch_size: int, longest: int):
        config = self.config_for(options)
        limit = (self.target_profile.source.config or {}).get("max_position_embeddings")
        limit = limit if type(limit) is int and limit > 0 else None
        # room for the longest prompt, its tokens and a step's proposals; at least MIN_MODEL_LEN (vLLM's warm-up)
        wanted = max(MIN_MODEL_LEN, longest + options.max_new_tokens + engine_k(options.k) + 1)
        spec = EngineSpec(target=self.target_profile.location, speculative=config, max_num_seqs=batch_size,
                          max_model_len=min(wanted, limit) if limit else wanted, dtype=self.dtype, seed=options.seed)
        if self._llm is not None and self._llm_spec is not None and _same_engine(self._llm_spec, spec):
            return self._llm
        self.close()
        if config is not None:
            validate(spec.target, config, dtype=self.dtype)
        self._llm, self._llm_spec = start(spec, self.debug), spec
        return self._llm

    def engine_for(self, options, batch_size: int, ids: Sequence[Sequence[int]]):
        """The engine for ``options`` scheduling up to ``batch_size`` rows of ``ids``: the running one where it
        fits, else a new one."""
        return self._engine(options, batch_size, max(len(p) for p in ids))

    def close(self) -> None:
        """Shut the engine down (its memory back) before another starts."""
        if self._llm is not None:
            engine, self._llm = self._llm, None
            shutdown = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                shutdown.shutdown()
            del engine
            import gc

            gc.collect()

    def encode(self, prompts, chat: bool) -> list[list[int]]:
        from ..decode.load.loading import encode_prompts

        return encode_prompts(self.target_profile, prompts, chat)

    def generate(self, prompts, options, *, chat: bool = False, batch_size: int = 1, on_tokens=None):
        ids = self.encode(prompts, chat)
        return self.generate_ids_batches(prompts, ids, options, batch_size=batch_size, on_tokens=on_tokens)

    def generate_ids_batches(self, prompts, ids, options, *, batch_size: int = 1, on_tokens=None,
                             max_num_seqs: int | None = None):
        """Every prompt in batches of ``batch_size``, on an engine scheduling ``max_num_seqs`` rows (the batch size
        by default; more where one engine serves several batch sizes, as a served table's does)."""
        from ..decode.metrics import Metrics
        from ..decode.session import RunResult, SequenceResult

        llm = self._engine(options, max(batch_size, max_num_seqs or 0), max(len(p) for p in ids))
        tokenizer = self.target_profile.source.tokenizer
        metrics = Metrics(method=options.method, k=engine_k(options.k) if options.method.proposes else 0,
                          batch_size=0)
        results, interrupted = [], False
        try:
            for begin in range(0, len(ids), batch_size):
                chunk = ids[begin:begin + batch_size]
                callback = (lambda row, new, base=begin: on_tokens(base + row, new)) if on_tokens else None
                before = counters(llm)
                rows, wall = generate_batch(llm, chunk, sampling_params(options, self.eos_ids,
                                                                        options.max_new_tokens), callback)
                metrics = metrics.merge(batch_metrics(options, rows, wall, counted(before, counters(llm)),
                                                      len(chunk)))
                for offset, row in enumerate(rows):
                    results.append(SequenceResult(
                        prompt=prompts[begin + offset], prompt_ids=tuple(chunk[offset]), token_ids=row.token_ids,
                        text=tokenizer.decode(list(row.token_ids), skip_special_tokens=True),
                        finish_reason=row.finish_reason))
        except KeyboardInterrupt:
            interrupted = True
        return RunResult(sequences=tuple(results), metrics=metrics, interrupted=interrupted)


def _same_engine(a: EngineSpec, b: EngineSpec) -> bool:
    return (a.target, a.speculative, a.max_num_seqs, a.dtype, a.seed) == (b.target, b.speculative, b.max_num_seqs,
                                                                           b.dtype, b.seed) \
        and b.max_model_len <= a.max_model_len


def batch_metrics(options, rows: Sequence[StepTimes], wall: float, spec: dict[str, Any], size: int):
    """vocabcheck's Metrics for one batch: rows from the loop's steps and times, drafts from vLLM's counters."""
    from ..decode.metrics import EngineCounts, Metrics, RowMetrics

    row_metrics = []
    for row in rows:
        later = row.counts[1:]
        row_metrics.append(RowMetrics(first_tokens=1 if row.counts else 0, steps=len(later),
                                      accepted=sum(c - 1 for c in later), generated=sum(row.counts),
                                      first_at=row.first_at or 0.0, last_at=row.last_at))
    drafts, drafted = spec[SPEC_COUNTERS[0]], spec[SPEC_COUNTERS[1]]
    per_pos = tuple(spec[SPEC_COUNTERS[3]])
    full = bool(per_pos) and drafted == drafts * len(per_pos)  # every draft k long: drafted by position is known
    counts = EngineCounts(drafted=drafted, accepted=spec[SPEC_COUNTERS[2]],
                          drafted_at=(drafts,) * len(per_pos) if full else (),
                          accepted_at=per_pos if full else ())
    return Metrics(method=options.method, k=engine_k(options.k) if options.method.proposes else 0,
                   batch_size=size, rows=row_metrics, verify_passes=max((len(r.counts) - 1 for r in rows), default=0),
                   total_s=wall, ttft_s=min((r.first_at for r in rows if r.first_at is not None), default=0.0),
                   engine_counts=counts if options.method.proposes else None)


def open_session(request, *, debug: bool = False, on_refusal=None, on_warning=None,
                 progress: Callable[[str], None] | None = None) -> VllmSession:
    """Judge the pair (an incompatible one refused before vLLM is imported), align a padded draft into the cache,
    and return the session; the engine starts on the first ``generate``."""
    from ..decode.device import resolve_dtype
    from ..decode.session import judge_draft
    from ..profile import profile_of

    if request.translate:
        raise VocabcheckError("--translate runs on vocabcheck's own decoder only; vLLM needs one tokenizer for the "
                              "pair (drop --engine vllm)")
    draft_profile = comparison = None
    if request.draft is not None:
        target_profile, draft_profile, comparison, _ = judge_draft(request, None, on_refusal, on_warning)
    else:
        target_profile = profile_of(request.target)
    from ..decode.load.loading import check_room

    check_room(target_profile, request.max_new_tokens)
    engine.require(debug)  # after the verdict: a refused pair never waits for vLLM
    device = engine.device_type()
    if request.device not in ("auto", device) and not (device == "cuda" and request.device.startswith("cuda")):
        raise VocabcheckError(f"--device {request.device}: this vLLM build runs on {device}")
    import torch

    dtype = str(resolve_dtype(request.dtype, torch.device("cuda" if device == "cuda" else "cpu"))).removeprefix(
        "torch.")
    draft_dir = None
    if comparison is not None:
        draft_dir = str(aligned_draft(comparison, progress=progress))
    return VllmSession(request=request, target_profile=target_profile, draft_profile=draft_profile,
                       comparison=comparison, draft_dir=draft_dir, dtype=dtype, device=device, debug=debug,
                       engine_version=engine.version())
