"""`vocabcheck predict`: a pair's acceptance, best k and speedup for one or more drafts (and n-gram lookup), from
teacher-forced passes over the target's sequences instead of speculative runs.

The target is loaded once (:func:`vocabcheck.decode.session.start_session`), its sequences generated once or read
from recorded responses, its costs measured once; then each draft in turn is compared, refused or loaded
(:func:`vocabcheck.decode.session.with_draft`), predicted and dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..decode.load.loading import Prompt
from ..decode.mapping import PaddedMapping
from ..decode.options import DecodeOptions
from ..decode.sampling import Sampling
from ..decode.session import RunRequest, Session, start_session, with_draft
from ..decode.translate import TranslatedMapping, TranslatingProposer
from ..errors import BadOption, RefusedPair
from ..methods import MAX_K, Method
from . import continuations, cost, teacher
from .ngram_replay import ngram_proposals, ngram_runs
from .replay import replayed_counts
from .result import Candidate, Costs, Counts, KPrediction, Prediction
from .steps import RowRuns, expected_counts, greedy_counts, position_tables

Progress = Callable[[str], None]  # called once per unit of work, with what was done


@dataclass(frozen=True)
class PredictRequest:
    """What to predict: the target, the drafts as the user named them, the k values and temperatures, and the run
    the predictions stand for (``options``: tokens per prompt, eos, seed; ``batch_size`` prompts together)."""

    target: str
    drafts: tuple[str, ...]
    k_values: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    temperatures: tuple[float, ...] = ()
    top_k: int = 0
    top_p: float = 1.0
    options: DecodeOptions = field(default_factory=lambda: DecodeOptions(method=Method.NONE))
    batch_size: int = 1
    batch_sizes: tuple[int, ...] = ()  # more batch sizes to predict (the serving table); the first is batch_size
    sequence_batch_size: int = 16  # prompts the target's own sequences are generated for together
    chat: bool = False
    ngram: bool = True
    device: str = "auto"
    dtype: str = "auto"
    measure_costs: bool = True
    engine: str = "vocabcheck"  # whose steps price the speedups: vocabcheck's decoder, or vLLM's (an engine per k)

    def __post_init__(self) -> None:
        if not self.k_values or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K
                                    for k in self.k_values):
            raise BadOption(f"-k values must be between 1 and {MAX_K}, not {list(self.k_values)}")
        if min(self.batch_size, self.sequence_batch_size, *self.batch_sizes) < 1:
            raise BadOption("--batch-size must be at least 1, not "
                            f"{min(self.batch_size, self.sequence_batch_size, *self.batch_sizes)}")
        for temperature in self.temperatures:
            Sampling(temperature=temperature, top_k=self.top_k, top_p=self.top_p)  # one line for a bad value
            if temperature == 0:
                raise BadOption("--temperature values are for sampling (greedy is always predicted): not 0")

    @property
    def every_batch_size(self) -> tuple[int, ...]:
        """``batch_size`` and then the other ``batch_sizes``, in increasing order, each once."""
        return (self.batch_size, *sorted(set(self.batch_sizes) - {self.batch_size}))

    @property
    def k_max(self) -> int:
        return max(self.k_values)

    def sampling(self, temperature: float) -> Sampling:
        return Sampling(temperature=temperature, top_k=self.top_k, top_p=self.top_p)

    def units(self) -> int:
        """Units of work the progress callback is called for: the sequences (greedy and per temperature), the target's
        costs per batch size, and per candidate the same."""
        per_candidate = 1 + len(self.temperatures) + len(self.every_batch_size)
        return per_candidate * (1 + len(self.drafts) + int(self.ngram))


@dataclass(frozen=True)
class _Context:
    """What every candidate is predicted over."""

    request: PredictRequest
    session: Session
    greedy: continuations.Continuations
    sampled: tuple[continuations.Continuations, ...]
    target_step_s: float
    verify_s: tuple
    say: Progress
    noise: str = ""  # why the target's costs cannot be trusted


def _timing_context(greedy: continuations.Continuations) -> tuple[int, ...]:
    """The context costs are timed over: the first prompt and half its continuation."""
    chain = greedy.chains[0]
    return chain.prompt + chain.tokens[:max(1, len(chain.tokens) // 2)]


def predict(request: PredictRequest, prompts: Sequence[Prompt], progress: Progress | None = None,
            on_refusal=None) -> Prediction:
    """Predict every candidate at ``request.batch_size``; ``progress(label)`` is called after each unit of
    :meth:`PredictRequest.units`."""
    return predict_batches(request, prompts, progress, on_refusal)[0]


def predict_batches(request: PredictRequest, prompts: Sequence[Prompt], progress: Progress | None = None,
                    on_refusal=None) -> tuple[Prediction, ...]:
    """One prediction per batch size of :attr:`PredictRequest.every_batch_size`, in that order, over one load of the
    models and one set of the target's sequences: the acceptance is the sequences', the counts of steps and the costs
    are each batch size's own."""
    say = progress or (lambda label: None)
    start = time.perf_counter()
    session = start_session(RunRequest(target=request.target, draft=None, methods=tuple(Method),
                                       device=request.device, dtype=request.dtype,
                                       max_new_tokens=request.options.max_new_tokens))
    prompt_ids = session.encode(prompts, request.chat)
    contexts = _prepare(request, session, prompts, prompt_ids, say)
    per_batch: list[list[Candidate]] = [[] for _ in contexts]
    if request.ngram:
        for row, candidate in zip(per_batch, _ngram(contexts)):
            row.append(candidate)
    for draft in request.drafts:
        for row, candidate in zip(per_batch, _draft(contexts, draft, on_refusal)):
            row.append(candidate)
    seconds = time.perf_counter() - start
    greedy = contexts[0].greedy
    engine = next((c.costs.engine for row in per_batch for c in row if c.costs is not None), request.engine)
    return tuple(Prediction(target=request.target, candidates=tuple(sorted(row, key=_rank)), prompts=len(prompts),
                            tokens=greedy.tokens, source="recorded" if greedy.recorded else "generated",
                            k_values=request.k_values, temperatures=request.temperatures,
                            batch_size=context.request.batch_size, device=str(session.device),
                            dtype=str(session.dtype).removeprefix("torch."), seconds=seconds, engine=engine)
                 for row, context in zip(per_batch, contexts))


def predict_loaded(request: PredictRequest, session: Session, greedy: continuations.Continuations,
                   sampled: Sequence[continuations.Continuations] = (), progress: Progress | None = None
                   ) -> tuple[Candidate, ...]:
    """The candidates of a session already loaded — n-gram lookup (where ``request.ngram``) and the session's own
    draft (where it has one), in that order — over sequences already made (``sampled``: one per
    ``request.temperatures``), with costs measured at ``request.batch_size``. `bench --predict` calls it with the
    models it measures; ``request.target`` and ``request.drafts`` are not read."""
    contexts = _contexts(request, session, greedy, sampled, progress or (lambda label: None))[:1]
    candidates = _ngram(contexts)[:1] if request.ngram else []
    if session.draft_model is not None:
        candidates += _loaded_draft(contexts, session, str(session.request.draft))[:1]
    return tuple(candidates)


def _rank(candidate: Candidate) -> tuple:
    best = candidate.best
    if best is None:
        return (1, 0.0, 0.0)
    return (0, -(best.speedup or 0.0), -best.counts.mean_accepted_length)


def _prepare(request: PredictRequest, session: Session, prompts, prompt_ids, say: Progress) -> list[_Context]:
    options = request.options
    recorded = continuations.recorded(session, prompts, prompt_ids, options)
    batch = request.sequence_batch_size
    greedy = recorded or continuations.generated(session, prompt_ids, options, Sampling(), batch)
    say("the target's sequences")
    sampled = []
    for temperature in request.temperatures:
        sampled.append(recorded or continuations.generated(session, prompt_ids, options,
                                                           request.sampling(temperature), batch))
        say(f"the target's sequences at temperature {temperature:g}")
    return _contexts(request, session, greedy, sampled, say)


def _contexts(request: PredictRequest, session: Session, greedy: continuations.Continuations,
              sampled: Sequence[continuations.Continuations], say: Progress) -> list[_Context]:
    """What every candidate is predicted over, one per batch size, the target's costs measured at each (where asked
    for)."""
    out = []
    for batch_size in request.every_batch_size:
        step, verify, noise = 0.0, (), ""
        if request.measure_costs:
            step, verify, noise = cost.target_costs(session.target_model, _timing_context(greedy), batch_size,
                                                    request.k_values, session.device)
        out.append(_Context(replace(request, batch_size=batch_size), session, greedy, tuple(sampled), step, verify,
                            say, noise))
        say(f"the target's costs at batch {batch_size}")
    return out


def _with_steps(costs: Costs, context: _Context, session: Session, method: Method,
                engine_steps: dict | None = None) -> Costs:
    """``costs`` with the steps that price a k at the context's batch size — the decoder's own
    (:func:`cost.step_costs`), or those ``engine_steps`` holds (another engine's, :func:`_engine_steps`) — their noise
    added to the forwards' and their spread the costs' (the forwards, of which the fastest is kept, have none); as
    they are where costs are not measured."""
    request = context.request
    if not request.measure_costs:
        return costs
    engine, idle, by_k = "vocabcheck", 0.0, ()  # vocabcheck's decoder runs a batch served 0 as plain steps
    if engine_steps is not None:
        engine, by_batch = engine_steps["engine"], engine_steps["steps"]
        plain, steps, noise, spread, idle, by_k = by_batch[request.batch_size]
    else:
        prompts = [chain.prompt for chain in context.greedy.chains]
        plain, steps, noise, spread = cost.step_costs(session, prompts, request.batch_size, method, request.k_values,
                                                      request.options.max_new_tokens)
    return replace(costs, plain_step_s=plain, step_s=steps, engine=engine, idle_step_s=idle, step_s_by_k=by_k,
                   noise="; ".join(dict.fromkeys(r for r in (costs.noise, noise) if r)), spread=spread)


def _engine_steps(contexts: Sequence[_Context], method: Method, draft: str | None = None) -> dict | None:
    """Where the request names another engine (vLLM), its steps at every context's batch size, measured through it
    (:func:`cost.engine_step_costs`: an engine process per k, each given the first prompts of the largest batch and
    the pair as the user named it: the engine judges it and aligns a padded draft as ``run --engine vllm`` does);
    None for vocabcheck's own decoder."""
    request = contexts[0].request
    if request.engine == "vocabcheck" or not request.measure_costs:
        return None
    from ..engines.vllm_worker import EngineProcess, job

    sizes = [context.request.batch_size for context in contexts]
    prompts = cost.first_prompts([chain.prompt for chain in contexts[0].greedy.chains], max(sizes))
    options = request.options
    started: list = []

    def start(k: int, idle: bool = False):
        engine = EngineProcess(job(request.target, draft if k and method.needs_draft else None,
                                   method if k else Method.NONE, k, options, max(sizes), request.device,
                                   request.dtype, prompts, schedule=((1, max(sizes), 0),) if idle else None))
        started.append(engine.ready)
        return engine

    steps = cost.engine_step_costs(start, sizes, request.k_values, options.max_new_tokens)
    return {"engine": f"vLLM {started[0]['version']}", "steps": steps}


def _ragged(request) -> bool:
    """Whether the engine that runs the pair verifies each row's own proposals (vLLM) rather than padding every row
    to the widest (vocabcheck's decoder): how a replayed step's width is counted (:func:`greedy_counts`)."""
    return request.engine != "vocabcheck"


def _predictions(context: _Context, counts: Sequence[Counts], costs: Costs | None,
                 greedy: Sequence[Counts] = ()) -> tuple[KPrediction, ...]:
    """Each k's counts with its speedup; a step's widths are the counts' own, or (sampled counts, which have none)
    the ``greedy`` counts' of the same k."""
    measured = costs is not None and context.request.measure_costs
    widths = {c.k: c.widths for c in greedy}
    return tuple(KPrediction(c, costs.speedup(c.mean_accepted_length, c.k, c.widths or widths.get(c.k, ()))
                             if measured else None) for c in counts)


def _ngram(contexts: Sequence[_Context]) -> list[Candidate]:
    """n-gram lookup at each context's batch size: the proposals and the sampled acceptance once, the step counts
    and the costs per batch size."""
    first = contexts[0]
    request, options = first.request, first.request.options
    chains, budgets = first.greedy.chains, first.greedy.budgets
    proposals = [ngram_proposals(c, options.ngram_min, options.ngram_max, request.k_max) for c in chains]
    runs = [ngram_runs(c, p, b) for c, p, b in zip(chains, proposals, budgets)]
    first.say("n-gram lookup, greedy")
    sampled_counts = []
    for temperature, chosen in zip(request.temperatures, first.sampled):
        found = [ngram_proposals(c, options.ngram_min, options.ngram_max, request.k_max) for c in chosen.chains]
        tables = teacher.point_acceptance(first.session.target_model, chosen.chains, found,
                                          request.sampling(temperature), first.session.device)
        sampled_counts.append((temperature, [expected_counts(tables, chosen.budgets, k) for k in request.k_values]))
        first.say(f"n-gram lookup, temperature {temperature:g}")
    engine_steps = _engine_steps(contexts, Method.NGRAM)
    out = []
    for context in contexts:
        costs = _with_steps(Costs(context.target_step_s, 0.0, context.verify_s, noise=context.noise,
                                  full_width=False), context, first.session, Method.NGRAM, engine_steps)
        counted = [greedy_counts(runs, k, context.request.batch_size, _ragged(request)) for k in request.k_values]
        greedy = _predictions(context, counted, costs)
        sampled = tuple((t, _predictions(context, counts, costs, counted)) for t, counts in sampled_counts)
        out.append(Candidate(draft="ngram", method=Method.NGRAM, greedy=greedy, sampled=sampled, costs=costs))
        context.say(f"n-gram lookup, costs at batch {context.request.batch_size}")
    return out


def _draft(contexts: Sequence[_Context], draft: str, on_refusal) -> list[Candidate]:
    first = contexts[0]
    try:
        # translated where the tokenizers differ (the report marks such a draft); a compatible pair needs no
        # translation, and the session's note that --translate does nothing is about a flag nobody gave here
        session = with_draft(first.session, draft, translate=True, on_refusal=on_refusal,
                             on_warning=lambda note: None)
    except RefusedPair as refusal:
        for _ in range(1 + len(first.request.temperatures) + len(contexts)):
            first.say(f"{draft}: refused")
        return [Candidate(draft=draft, method=Method.DRAFT, refused=refusal.one_line()) for _ in contexts]
    return _loaded_draft(contexts, session, draft)


def _loaded_draft(contexts: Sequence[_Context], session: Session, draft: str) -> list[Candidate]:
    """A draft loaded in ``session`` (its own alignment or translator) over the contexts' sequences, at each
    context's batch size."""
    first = contexts[0]
    request = first.request
    if session.translator is not None and request.engine != "vocabcheck":
        for _ in range(1 + len(request.temperatures) + len(contexts)):
            first.say(f"{draft}: not on {request.engine}")
        why = (f"its tokenizer differs from the target's: {request.engine} runs a pair of one tokenizer (vocabcheck's "
               "own decoder runs it through a translation: drop --engine)")
        return [Candidate(draft=draft, method=Method.DRAFT, translated=True, refused=why) for _ in contexts]
    device, model = session.device, session.draft_model
    chains, budgets = first.greedy.chains, first.greedy.budgets
    if session.translator is not None:
        target_rows = session.target_model.get_output_embeddings().weight.shape[0]

        def proposer(metrics):
            return TranslatingProposer(model, session.translator, metrics, target_rows, device)

        def counts_at(batch_size: int) -> list[Counts]:
            return [replayed_counts(proposer, chains, budgets, k, batch_size, device) for k in request.k_values]

        to_input = TranslatedMapping(session.translator.translation, target_rows, device).to_draft
        sampled = []
        for temperature in request.temperatures:
            first.say(f"{draft}: temperature {temperature:g} (not predicted for a translated draft)")
    else:
        mapping = PaddedMapping(session.comparison.alignment, model, device)
        matched = teacher.greedy_streaks(model, mapping, chains, device)
        runs = [RowRuns(len(c.tokens), b, m) for c, b, m in zip(chains, budgets, matched)]

        def counts_at(batch_size: int) -> list[Counts]:
            return [greedy_counts(runs, k, batch_size, _ragged(request)) for k in request.k_values]

        to_input = mapping.to_draft
        sampled = _sampled(first, session, mapping)
    first.say(f"{draft}: greedy")
    engine_steps = _engine_steps(contexts, Method.DRAFT, draft)
    out = []
    for context in contexts:
        batch_size = context.request.batch_size
        costs = None
        if request.measure_costs:
            costs = _with_steps(cost.draft_costs(model, to_input, _timing_context(context.greedy), batch_size, device,
                                                 context.target_step_s, context.verify_s, context.noise),
                                context, session, Method.DRAFT, engine_steps)
        context.say(f"{draft}: costs at batch {batch_size}")
        alignment = session.comparison.alignment
        counted = counts_at(batch_size)
        out.append(Candidate(draft=draft, method=Method.DRAFT, translated=session.translator is not None,
                             same_rows=alignment is None or alignment.target_rows == alignment.draft_rows,
                             greedy=_predictions(context, counted, costs),
                             sampled=tuple((t, _predictions(context, counts, costs, counted))
                                           for t, counts in sampled),
                             costs=costs))
    return out


def _sampled(context: _Context, session: Session, mapping) -> list[tuple[float, list[Counts]]]:
    request = context.request
    out = []
    for temperature, chosen in zip(request.temperatures, context.sampled):
        alphas = teacher.acceptance(session.target_model, session.draft_model, mapping, chosen.chains,
                                    request.sampling(temperature), session.device)
        tables = [position_tables(alpha, request.k_max) for alpha in alphas]
        out.append((temperature, [expected_counts(tables, chosen.budgets, k) for k in request.k_values]))
        context.say(f"{session.request.draft}: temperature {temperature:g}")
    return out
