"""`bench --predict`: what `vocabcheck predict` says of each of the bench's speculative cells, made with the models
the bench measures, over the same prompts, before the measured runs — none of its work falls inside a timed cell.

The target's sequences are generated once (plain decoding, greedy; and sampled at the bench's temperature where it
samples); for each batch size they are cycled as the bench cycles its prompts to fill its batches, the costs are
measured at that batch size, and n-gram lookup and the draft are replayed per k
(:func:`vocabcheck.predict.predictor.predict_loaded`). Greedy predictions are exactly what the cells measure
(accepted tokens, acceptance, mean accepted length); sampled ones are expected values. A fixed-k cell gets the
prediction for its k. An ``auto`` cell has no single k: it gets the prediction for the fixed k in :data:`AUTO_KS`
(and the plan's fixed ks) with the best predicted speedup — what the adaptive controller would reach by settling on
the best single k — and ``k`` says which. A translated draft has no sampled prediction (as in `predict`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..decode.sampling import Sampling
from ..methods import SPECULATIVE, Method
from ..predict import continuations
from ..predict.predictor import PredictRequest, predict_loaded
from ..predict.result import Candidate, KPrediction
from .plan import AUTO, BenchPlan, KValue, Predicted

AUTO_KS = (1, 2, 3, 4, 5, 6, 7, 8)  # the fixed ks an auto cell's prediction is chosen from (predict's default)
SEQUENCE_BATCH = 16  # prompts the target's sequences are generated for together (as `predict`)


@dataclass(frozen=True)
class BenchPrediction:
    """Every speculative cell's prediction by (method, batch size, k); callable as :data:`vocabcheck.bench.Predict`."""

    cells: tuple[tuple[tuple[str, int, KValue], Predicted], ...]
    seconds: float

    def __call__(self, method: str, batch_size: int, k: KValue) -> Predicted | None:
        return dict(self.cells).get((method, batch_size, k))


def predict_cells(session, prompt_ids: Sequence[Sequence[int]], plan: BenchPlan,
                  progress: Callable[[str], None] | None = None) -> BenchPrediction:
    """The prediction of every (method, batch size, k) speculative cell of ``plan`` on ``session``'s models (which
    must allow plain decoding: the target's sequences are its own)."""
    start = time.perf_counter()
    methods = tuple(m for m in SPECULATIVE if m in plan.methods
                    and (not m.needs_draft or session.draft_model is not None))
    fixed = {k for k in plan.ks if k != AUTO}
    k_values = tuple(sorted(fixed | (set(AUTO_KS) if AUTO in plan.ks else set())))
    if not methods or not k_values:
        return BenchPrediction((), 0.0)
    options = replace(plan.options, method=Method.NONE)
    sampling = options.sampling
    say = progress or (lambda label: None)
    say("predicting: the target's sequences")
    greedy = continuations.generated(session, prompt_ids, options, Sampling(), SEQUENCE_BATCH)
    sampled = () if sampling.greedy else \
        (continuations.generated(session, prompt_ids, options, sampling, SEQUENCE_BATCH),)
    cells = []
    for batch in plan.batch_sizes:
        rows = max(batch, -(-len(prompt_ids) // batch) * batch)  # the bench's cycled prompts at this batch size
        request = PredictRequest(target=str(session.request.target), drafts=(), k_values=k_values,
                                 temperatures=() if sampling.greedy else (sampling.temperature,),
                                 top_k=sampling.top_k, top_p=sampling.top_p, options=options, batch_size=batch,
                                 ngram=Method.NGRAM in methods)
        candidates = predict_loaded(request, session, continuations.cycled(greedy, rows),
                                    [continuations.cycled(s, rows) for s in sampled],
                                    progress=lambda label, b=batch: say(f"predicting, batch {b}: {label}"))
        for candidate in candidates:
            if candidate.method in methods:
                cells += _cells(candidate, batch, plan, sampling)
    return BenchPrediction(tuple(cells), time.perf_counter() - start)


def _cells(candidate: Candidate, batch: int, plan: BenchPlan, sampling: Sampling) -> list:
    per_k = candidate.greedy if sampling.greedy else dict(candidate.sampled).get(sampling.temperature, ())
    if not per_k:  # a translated draft when sampling: not predicted
        return []
    by_k = {p.k: p for p in per_k}
    best = max(per_k, key=lambda p: (p.speedup if p.speedup is not None else 0.0, p.counts.mean_accepted_length))
    return [((candidate.method, batch, k), _predicted(best if k == AUTO else by_k[k])) for k in plan.ks]


def _predicted(prediction: KPrediction) -> Predicted:
    counts = prediction.counts
    return Predicted(k=prediction.k, acceptance_rate=counts.acceptance_rate,
                     mean_accepted_length=counts.mean_accepted_length, accepted_tokens=counts.accepted,
                     speedup=prediction.speedup)
