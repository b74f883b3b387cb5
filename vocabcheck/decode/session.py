"""A run of the decoder on a pair: compare first, refuse an incompatible pair, load the models once, then generate
for any number of prompts in batches. The CLI's `run` and the benchmark share it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from ..errors import InputError, RefusedPair
from ..interrupts import Terminated, signal_of
from ..check import compare
from ..profile import ModelProfile, profile_of
from ..methods import Method
from ..verdict import Comparison, Verdict, judge, translation_blockers
from .load.cache_check import check_models
from .device import resolve_device, resolve_dtype
from .engine import OnStep, OnTokens, generate
from .load.loading import Prompt, check_rollback, check_room, encode_prompts, load_model
from .metrics import Metrics
from .options import DecodeOptions
from .result import Generation
from .translate import Translator


@dataclass(frozen=True)
class RunRequest:
    """Which pair to load, where, and which methods will run on it (speculative methods need a cache that can be
    rolled back: checked from the configs before any weight is loaded)."""

    target: str
    draft: str | None
    methods: tuple[Method, ...] = tuple(Method)
    device: str = "auto"
    dtype: str = "auto"
    allow_incompatible: bool = False
    translate: bool = False  # a pair whose tokenizers differ runs through its shared tokens
    max_new_tokens: int | None = None  # checked against the target's context before the weights load

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", tuple(Method.parse(m) for m in self.methods))


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
    signum: int = 0  # the signal that stopped the run (interrupted): SIGINT, SIGTERM or SIGHUP


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
    translator: Translator | None = None  # set where the draft runs translated (its tokenizer differs)
    engine: str = "vocabcheck"  # the engine seam (vocabcheck.engines): this session is vocabcheck's own decoder

    @property
    def engine_version(self) -> str:
        from .. import __version__

        return __version__

    def encode(self, prompts: Sequence[Prompt], chat: bool) -> list[list[int]]:
        return encode_prompts(self.target_profile, prompts, chat)

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], options: DecodeOptions,
                     on_tokens: OnTokens | None = None, generator=None, on_step: OnStep | None = None) -> Generation:
        if options.method not in self.request.methods and options.method.proposes:  # plain decoding always runs
            raise ValueError(f"this session was started for {', '.join(self.request.methods)}, not {options.method}")
        use_draft = options.method.needs_draft
        translated = use_draft and self.translator is not None
        return generate(self.target_model, prompt_ids, options, draft=self.draft_model if use_draft else None,
                        alignment=self.comparison.alignment if use_draft and not translated else None,
                        translator=self.translator if translated else None, eos_ids=self.eos_ids,
                        on_tokens=on_tokens, generator=generator, on_step=on_step)

    def generate(self, prompts: Sequence[Prompt], options: DecodeOptions, *, chat: bool = False,
                 batch_size: int = 1, on_tokens: OnTokens | None = None) -> RunResult:
        """Generate for every prompt, ``batch_size`` at a time; ``on_tokens(index, ids)`` streams by prompt index.
        Ctrl-C ends the run with what was generated so far (``interrupted``), wherever it lands."""
        ids = self.encode(prompts, chat)
        generator = torch.Generator(device=self.device).manual_seed(options.seed)  # one sampler stream per run
        done: list[tuple[int, Generation]] = []
        interrupted, signum = False, 0
        try:
            for begin in range(0, len(ids), batch_size):
                callback = (lambda row, new, base=begin: on_tokens(base + row, new)) if on_tokens else None
                done.append((begin, self.generate_ids(ids[begin:begin + batch_size], options, on_tokens=callback,
                                                       generator=generator)))
                if done[-1][1].interrupted:
                    signum = done[-1][1].signum
                    break
        except (KeyboardInterrupt, Terminated) as stop:
            interrupted, signum = True, signal_of(stop)
        return self._result(prompts, options, done, interrupted, signum)

    def _result(self, prompts, options: DecodeOptions, done, interrupted: bool, signum: int = 0) -> RunResult:
        tokenizer = self.target_profile.source.tokenizer
        results: list[SequenceResult] = []
        metrics = Metrics(method=options.method, k=options.k_label, batch_size=0)
        for begin, generation in done:
            metrics = metrics.merge(generation.metrics)
            interrupted = interrupted or generation.interrupted
            for offset, sequence in enumerate(generation.sequences):
                results.append(SequenceResult(
                    prompt=prompts[begin + offset], prompt_ids=sequence.prompt_ids, token_ids=sequence.token_ids,
                    text=tokenizer.decode(list(sequence.token_ids), skip_special_tokens=True),
                    finish_reason=sequence.finish_reason))
        return RunResult(sequences=tuple(results), metrics=metrics, interrupted=interrupted,
                         signum=signum or (2 if interrupted else 0))


def start_session(request: RunRequest, on_refusal: Callable[[Comparison], None] | None = None,
                  on_warning: Callable[[str], None] | None = None) -> Session:
    """Profile and compare the pair, refuse an incompatible one (unless allowed), then load the models and check
    their caches' behaviour on a few tokens (:mod:`vocabcheck.decode.load.cache_check`). ``on_warning`` hears of an
    option that does nothing on this pair (default: one "warning:" line on stderr)."""
    draft_profile = comparison = translator = None
    if request.draft is None:
        target_profile = profile_of(request.target)
    else:
        target_profile, draft_profile, comparison, translator = judge_draft(request, None, on_refusal,
                                                                             on_warning or _warn)
    check_room(target_profile, request.max_new_tokens)
    if any(m.proposes for m in request.methods):
        for profile in (target_profile, draft_profile):
            if profile is not None:
                check_rollback(profile)
    device = resolve_device(request.device)
    dtype = resolve_dtype(request.dtype, device)
    target_model = load_model(target_profile, device, dtype)
    draft_model = load_model(draft_profile, device, dtype) if draft_profile is not None else None
    # refused here, naming the files, before anything generates; a target that only plain decoding may use is handed
    # to transformers by generate, which takes the verdict loop_problem kept for the model object
    check_models(request.methods, target_model, draft_model, target_profile.location,
                 draft_profile.location if draft_profile is not None else None)
    return Session(request=request, target_profile=target_profile, draft_profile=draft_profile,
                   comparison=comparison, device=device, dtype=dtype, target_model=target_model,
                   draft_model=draft_model, eos_ids=target_profile.generation_eos, translator=translator)


def with_draft(session: Session, draft: str, *, translate: bool = False,
               on_refusal: Callable[[Comparison], None] | None = None,
               on_warning: Callable[[str], None] | None = None) -> Session:
    """The session's target (already loaded) with another draft: compared, refused, loaded and checked as
    :func:`start_session` does."""
    request = replace(session.request, draft=draft, translate=translate,
                      methods=tuple(dict.fromkeys(session.request.methods + (Method.DRAFT,))))
    _, draft_profile, comparison, translator = judge_draft(request, session.target_profile, on_refusal,
                                                            on_warning or _warn)
    check_rollback(draft_profile)
    draft_model = load_model(draft_profile, session.device, session.dtype)
    check_models((Method.DRAFT,), None, draft_model, session.target_profile.location, draft_profile.location)
    return replace(session, request=request, draft_profile=draft_profile, comparison=comparison,
                   draft_model=draft_model, translator=translator)


def judge_draft(request: RunRequest, target_profile: ModelProfile | None, on_refusal, on_warning):
    """Both profiles, the comparison and the translator (the target's profile is read here unless given); an
    incompatible pair is refused (RefusedPair)."""
    if target_profile is None:
        comparison = compare(request.target, request.draft)
    else:
        comparison = judge(target_profile, profile_of(request.draft))
    translator = _translator(request, comparison, on_refusal, on_warning)
    if comparison.verdict is Verdict.INCOMPATIBLE and not (request.allow_incompatible or translator):
        why = ""  # where on_refusal shows the findings, the error line only says what to do
        if on_refusal is not None:
            on_refusal(comparison)
        else:
            why = " (" + "; ".join(f"{f.code}: {f.message}" for f in comparison.top_findings(2)) + ")"
        hint = "--translate runs it through their shared tokens, " if comparison.translation is not None \
            and comparison.translation.translatable else ""
        raise RefusedPair(f"refused: the pair is incompatible{why}; {hint}--allow-incompatible runs it with "
                          "raw ids anyway")
    return comparison.target, comparison.draft, comparison, translator


def _translator(request: RunRequest, comparison: Comparison, on_refusal, on_warning) -> Translator | None:
    """The translated draft where ``--translate`` asks for it and ids differ in meaning. A compatible pair needs no
    translation (its alignment is exact: a warning says so); a model broken on its own is refused whatever the
    translation could do (one line, exit 2); a pair without shared tokens is refused."""
    translation = comparison.translation
    if not request.translate:
        return None
    if translation is None or comparison.verdict is not Verdict.INCOMPATIBLE:
        why = "the tokenizers are equivalent" if translation is None else "every id both models produce means the same"
        on_warning(f"--translate does nothing on this pair ({comparison.verdict.value}): {why}; ignored")
        return None
    for finding in translation_blockers(comparison.findings):
        side = finding.details.get("side")
        raise InputError(f"refused: {finding.code}: {finding.message}; --translate cannot run a model broken on "
                         "its own", where=request.target if side == "target" else request.draft)
    if not translation.translatable or not translation.shared_tokens:
        if on_refusal is not None:
            on_refusal(comparison)
        raise RefusedPair(f"refused: --translate cannot run this pair: "
                          f"{translation.reason or 'the tokenizers share no tokens'}")
    return Translator(translation, comparison.draft.source.tokenizer, comparison.target.tokenizer.tokens)


def _warn(text: str) -> None:
    """One line in vocabcheck's voice on stderr (never a Python warning with a source line)."""
    import sys

    from ..text import printable

    print(f"warning: {printable(' '.join(text.split()))}", file=sys.stderr)
