"""A run of the decoder on a pair: compare first, refuse an incompatible pair, load the models once, then generate
for any number of prompts in batches. The CLI's `run` and the benchmark share it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import RefusedPair
from ..profile import ModelProfile, build_profile
from ..sources import open_model
from ..verdict import Comparison, Verdict, judge
from .engine import Generation, Metrics, generate
from .loading import Prompt, encode_prompts, load_model, resolve_device, resolve_dtype
from .sampling import Sampling


@dataclass(frozen=True)
class RunRequest:
    target: str
    draft: str | None
    method: str = "draft"
    device: str = "auto"
    dtype: str = "auto"
    allow_incompatible: bool = False


@dataclass(frozen=True)
class SequenceResult:
    prompt: Prompt
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str


@dataclass(frozen=True)
class RunResult:
    sequences: tuple[SequenceResult, ...]
    metrics: Metrics
    interrupted: bool = False


@dataclass
class Session:
    request: RunRequest
    target_profile: ModelProfile
    draft_profile: ModelProfile | None
    comparison: Comparison | None
    device: object
    dtype: object
    target_model: object
    draft_model: object | None
    eos_ids: tuple[int, ...] = field(default=())

    def encode(self, prompts: Sequence[Prompt], chat: bool) -> list[list[int]]:
        return encode_prompts(self.target_profile, prompts, chat)

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], *, method: str | None = None, k: int = 4,
                     max_new_tokens: int = 64, sampling: Sampling = Sampling(), seed: int = 0, ngram_min: int = 1,
                     ngram_max: int = 3, on_tokens=None, time_phases: bool | None = None,
                     ignore_eos: bool = False) -> Generation:
        method = method or self.request.method
        use_draft = method == "draft"
        return generate(self.target_model, prompt_ids, method=method,
                        draft=self.draft_model if use_draft else None,
                        alignment=self.comparison.alignment if use_draft else None, k=k,
                        max_new_tokens=max_new_tokens, sampling=sampling,
                        eos_ids=() if ignore_eos else self.eos_ids, seed=seed,
                        ngram_min=ngram_min, ngram_max=ngram_max, on_tokens=on_tokens, time_phases=time_phases)

    def generate(self, prompts: Sequence[Prompt], *, chat: bool = False, batch_size: int = 1,
                 on_tokens: Callable[[int, list[int]], None] | None = None, **options) -> RunResult:
        """Generate for every prompt, ``batch_size`` at a time; ``on_tokens(index, ids)`` streams by prompt index."""
        ids = self.encode(prompts, chat)
        tokenizer = self.target_profile.source.tokenizer
        results: list[SequenceResult] = []
        merged: Metrics | None = None
        interrupted = False
        for begin in range(0, len(ids), batch_size):
            chunk = ids[begin:begin + batch_size]
            callback = (lambda row, new, base=begin: on_tokens(base + row, new)) if on_tokens else None
            generation = self.generate_ids(chunk, on_tokens=callback, **options)
            merged = generation.metrics if merged is None else merged.merge(generation.metrics)
            for offset, sequence in enumerate(generation.sequences):
                results.append(SequenceResult(
                    prompt=prompts[begin + offset], prompt_ids=sequence.prompt_ids, token_ids=sequence.token_ids,
                    text=tokenizer.decode(list(sequence.token_ids), skip_special_tokens=True),
                    finish_reason=sequence.finish_reason))
            if generation.interrupted:
                interrupted = True
                break
        return RunResult(sequences=tuple(results), metrics=merged, interrupted=interrupted)


def start_session(request: RunRequest, on_refusal: Callable[[Comparison], None] | None = None) -> Session:
    """Profile and compare the pair, refuse an incompatible one (unless allowed), then load the models."""
    target_profile = build_profile(open_model(request.target))
    draft_profile = comparison = None
    if request.draft is not None:
        draft_profile = build_profile(open_model(request.draft))
        comparison = judge(target_profile, draft_profile)
        if comparison.verdict is Verdict.INCOMPATIBLE and not request.allow_incompatible:
            if on_refusal is not None:
                on_refusal(comparison)
            top = "; ".join(f"{f.code}: {f.message}" for f in comparison.top_findings(2))
            raise RefusedPair(f"refused: the pair is incompatible ({top}); --allow-incompatible runs it anyway")
    device = resolve_device(request.device)
    dtype = resolve_dtype(request.dtype, device)
    target_model = load_model(target_profile, device, dtype)
    draft_model = load_model(draft_profile, device, dtype) if draft_profile is not None else None
    eos = target_profile.generation_eos or ((target_profile.specials.eos.id,) if target_profile.specials.eos
                                           and target_profile.specials.eos.id is not None else ())
    return Session(request=request, target_profile=target_profile, draft_profile=draft_profile,
                   comparison=comparison, device=device, dtype=dtype, target_model=target_model,
                   draft_model=draft_model, eos_ids=tuple(eos))
