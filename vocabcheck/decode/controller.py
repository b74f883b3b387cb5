"""How many tokens to propose each step (``-k auto``): the width that maximises the expected emitted tokens per second,
from acceptance and costs measured while the call runs.

**What a step costs.** Rows are left-padded to the step's widest, so a verification of width W carries B·(W+1) slots
whatever each row proposed, and a draft model runs one forward of the whole batch per proposed position. A step of B
live rows is modelled as

    t(W) = a + p·[W = 0] + b·D + c·S        D = draft forwards (W for a draft model, 0 for a lookup), S = B·(W + 1)

(``a``: everything a step pays that does not grow with the width, host work included; ``p``: what a plain step pays
apart, on its own path: no draft, no verification bookkeeping, its own head kernel). :class:`StepCosts` fits a, p, b,
c by least squares over the steps so far, one fit per number of live rows (a CPU's step is not linear in its rows: a
step of 3 rows costs nearly what one of 16 does, and fitted together the rows leaving at a call's end made a plain
step of 16 rows look 40 % dearer than it was), recent steps weighing more, each step timed from the previous step's
read-back to its own (the step's one host sync, so the timing adds none). A step in which the CPU head timed a
candidate kernel (:mod:`vocabcheck.decode.head`) is left out, and so is the first step of each shape (live rows, draft
forwards, slots) in a process: it pays once for the shape (measured at 1.5–2× the shape's later steps). A CPU, whose
verification is compute-bound, learns a large c; a GPU, memory-bound at these sizes, a small one: no table per device.
A small ridge holds each coefficient to a prior, scaled by the first measured step, that a few measured steps
outweigh: a draft forward costs the draft's share of the pair's parameters, each extra verified slot ``SLOT_SHARE`` of
a row's plain step, and a plain step nothing apart.

**What a step earns.** Row i accepts each proposal with probability α_i given the ones before it were accepted
(geometric, as in Leviathan et al.), so with w proposals it emits 1 + α_i + … + α_i^w tokens in expectation.
:class:`Acceptance` estimates α_i per row from what the row accepted and rejected, as a Beta posterior whose counts
decay (``MEMORY`` per step the row is verified with proposals, ``IDLE`` per step without), starting from a Beta(1, 1)
prior: no warm-up run (a later call on the same pair starts each row from what the earlier calls' rows accepted,
pooled, with the same weight as that prior). The idle decay lets a row that stopped proposing drift back to the prior,
so a draft that becomes useful again is tried again after a few dozen plain steps.

**The choice.** W = argmax over 0…k_max of Σ_i E_i(min(W, reach_i)) / t(W), where ``reach_i`` is what row i can
propose (its budget, and for a lookup what its match holds), and W > 0 only where it promises ``GAIN_MARGIN`` more
than a plain step (a smaller predicted gain is within the fit's error, and a wrong guess costs more than it could
earn). Every row proposes up to W: a shorter row saves nothing, because the step costs what its widest row costs. W =
0 is a plain step with no draft forward; the draft catches up on what it skipped in its next proposal pass. The
controller only decides how many tokens are proposed, so the output is the target's own whatever it picks.

**Pricing a plain step.** A controller that keeps proposing never measures a plain step again, and the fit then prices
one by extending the proposing steps' line to width 0 (and, before two widths were measured, by the prior's slope, or
by what an earlier, busier process measured): on the demo pair at batch 16 that priced a 20 ms plain step at 25–40 ms,
and a width that gained 8 % looked like 35 % or more. So where the fit holds fewer than ``PLAIN_MIN`` plain steps of
the step's size of batch (decayed like the rest), the step is plain: about one step in thirty where the controller
keeps proposing. Where proposing wins by far (2× at batch 1) that costs under 1 %.

**Probing.** A plain step measures neither what proposals would earn nor what they would cost, so a controller that
chose W = 0 from its priors alone would never learn otherwise (at batch 16 on a CPU the prior's α = 0.5 does not pay
for the verification, though the demo draft's real α ≈ 0.8 does). So the second plain step of a call, and then every
``PROBE_AFTER``-th plain step in a row, proposes one token per row: the cheapest width that measures each row's
acceptance and what a proposing step costs (a probe at the width best under an optimistic α reached W = 8 at batch 16
on the CPU, seven plain steps' time, for a measurement the fit extends to every width anyway). Where speculation does
not pay, that costs about one verification of one extra slot per ``PROBE_AFTER`` steps; where it does, the measured α
and step times take over. Where the pair's pooled acceptance is below 0.5 the run between probes grows in proportion,
up to ``PROBE_MAX`` (a draft that almost never agrees is probed rarely: each probe costs a verification and the
draft's catch-up pass).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence

from .measured import MachineStore

MEMORY = 0.9  # acceptance counts kept per step a row is verified with proposals
IDLE = 0.99  # ... and per step it proposes nothing
PRIOR_ACCEPTED, PRIOR_REJECTED = 1.0, 1.0
COST_MEMORY = 0.95  # weight kept per step by the older step times
PRIOR_WEIGHT = 0.02  # the ridge's weight on the prior's coefficients (a measured step weighs 1): a few measured steps
# outweigh it, so that where the prior is wrong (it assumes cheap slots; a CPU at batch 16 pays nearly a plain row per
# slot) one measured width corrects every other width
PLAIN_WEIGHT = 0.25  # ... on the plain step's own term (prior 0): learnt only from plain and proposing steps both
SLOT_SHARE = 0.15  # prior: one more verified slot per row costs this share of a plain step
POOL_MEMORY = 0.99  # weight kept per row verification by the pooled acceptance a new call's rows start from
PROBE_AFTER = 16  # plain steps in a row after which one step proposes, to measure what proposals earn and cost
PROBE_MAX = 128  # ... at most, where the pair's pooled acceptance is low
PLAIN_MIN = 0.3  # a step is plain while the fit holds fewer (decayed) plain steps of its size of batch: one in ~30
GAIN_MARGIN = 0.03  # a width must promise this much more than a plain step: a gain smaller than the fit's error
# (step times vary by more on a shared machine) is as likely a loss


class Acceptance:
    """Per row, the decayed counts of accepted and rejected proposals, and α = the Beta posterior mean."""

    def __init__(self, rows: int, prior: tuple[float, float] = (PRIOR_ACCEPTED, PRIOR_REJECTED)):
        self.accepted = [0.0] * rows
        self.rejected = [0.0] * rows
        self.prior = prior

    def rate(self, row: int) -> float:
        a, r = self.accepted[row] + self.prior[0], self.rejected[row] + self.prior[1]
        return a / (a + r)

    def observe(self, row: int, judged: int, kept: int) -> None:
        """The row's proposals that counted (``judged``) and how many it accepted; a rejection where fewer."""
        keep = MEMORY if judged else IDLE
        self.accepted[row] = self.accepted[row] * keep + kept
        self.rejected[row] = self.rejected[row] * keep + (1.0 if kept < judged else 0.0)

    def keep_rows(self, live: Sequence[int]) -> None:
        self.accepted = [self.accepted[i] for i in live]
        self.rejected = [self.rejected[i] for i in live]


def expected_tokens(alpha: float, width: int) -> float:
    """1 + α + … + α^width: the tokens a row emits in expectation with ``width`` proposals."""
    return sum(alpha ** j for j in range(width + 1))


FEATURES = 4  # a step's x: 1, whether it is a plain step, draft forwards, verified slots


def features(live: int, draft: int, slots: int) -> tuple[float, float, float, float]:
    """A step's x: 1, whether it is a plain step (one slot per live row), draft forwards, verified slots."""
    return 1.0, 1.0 if slots <= live else 0.0, float(draft), float(slots)


class LiveFit:
    """The step-time fit for one number of live rows: decayed sums of x·xᵀ and x·t over x = (1, plain step, draft
    forwards, slots), and ``unit``, the seconds of a plain step at that size (from its first measured step)."""

    def __init__(self, rows: int):
        self.rows = rows  # live rows, the prior's scale for slots
        self.xx = [[0.0] * FEATURES for _ in range(FEATURES)]
        self.xt = [0.0] * FEATURES
        self.unit: float | None = None
        self.fit: list[float] | None = None

    def state(self) -> dict:
        return {"xx": self.xx, "xt": self.xt, "unit": self.unit}

    @classmethod
    def restored(cls, rows: int, state: object) -> "LiveFit | None":
        try:
            xx = [[float(v) for v in row] for row in state["xx"]]
            xt = [float(v) for v in state["xt"]]
            unit = float(state["unit"])
        except (TypeError, KeyError, ValueError, IndexError):
            return None
        if ([len(row) for row in xx] != [FEATURES] * FEATURES or len(xt) != FEATURES or unit <= 0
                or not all(math.isfinite(v) for v in [unit, *xt, *(v for row in xx for v in row)])
                or min(xx[i][i] for i in range(FEATURES)) < 0):
            return None
        fit = cls(rows)
        fit.xx, fit.xt, fit.unit = xx, xt, unit
        return fit


class StepCosts:
    """What steps cost for one pair, method and batch size: a fit per number of live rows (:class:`LiveFit`: a
    CPU's step is not linear in its rows, and the rows leaving at a call's end must not bend the full batch's fit;
    even 12 and 16 rows differed), by least squares with each older step's weight multiplied by ``COST_MEMORY``
    per step, held to a prior by a small ridge; and the pair's acceptance pooled over rows and calls. Kept per
    pair and method for the life of the models (:func:`costs_for`), so later calls start from what earlier ones
    measured, and on disk for later processes (:data:`STORE`)."""

    def __init__(self, draft_share: float, rows: int, k_max: int, key: str | None = None):
        self.draft_share, self.rows, self.k_max = draft_share, rows, k_max
        self.key = key  # where it is kept for later processes (STORE); None: not kept
        self.fits: dict[int, LiveFit] = {}  # live rows → fit
        self.shapes: set[tuple[int, int, int]] = set()  # (live rows, draft forwards, slots) stepped in this process
        self.pooled = [0.0, 0.0]  # every row's accepted and rejected proposals so far, decayed (POOL_MEMORY)

    @property
    def unit(self) -> float | None:
        """Seconds of a plain step of the whole batch (None before one was measured)."""
        fit = self.fits.get(self.rows)
        return fit.unit if fit is not None else None

    def state(self) -> dict:
        return {"fits": {str(live): fit.state() for live, fit in self.fits.items() if fit.unit is not None},
                "pooled": self.pooled}

    def restore(self, state: object) -> bool:
        """Start from what an earlier process on this machine measured (:meth:`state`, kept in :data:`STORE`);
        anything else is ignored (False)."""
        try:
            pooled = [float(v) for v in state["pooled"]]
            kept = state["fits"]
            fits = {int(live): LiveFit.restored(int(live), value) for live, value in kept.items()}
        except (TypeError, KeyError, ValueError, AttributeError):
            return False
        if (len(pooled) != 2 or not all(math.isfinite(v) and v >= 0 for v in pooled) or None in fits.values()
                or not all(0 < live <= self.rows for live in fits)):
            return False
        self.fits, self.pooled = fits, pooled
        return True

    def save(self) -> None:
        if self.key is not None and self.unit is not None:
            STORE.put(self.key, self.state())

    def observe_acceptance(self, judged: int, kept: int) -> None:
        """One row's verification, pooled over rows and calls."""
        if judged:
            self.pooled = [self.pooled[0] * POOL_MEMORY + kept,
                           self.pooled[1] * POOL_MEMORY + (1.0 if kept < judged else 0.0)]

    def probe_interval(self) -> int:
        """Plain steps in a row before a probe: ``PROBE_AFTER`` while the pooled acceptance is 0.5 or more, longer
        in proportion below it, ``PROBE_MAX`` at most."""
        a, r = self.acceptance_prior()
        alpha = a / (a + r)
        return int(min(PROBE_MAX, PROBE_AFTER / min(1.0, max(2.0 * alpha, PROBE_AFTER / PROBE_MAX))))

    def acceptance_prior(self) -> tuple[float, float]:
        """A new row's prior: the pooled acceptance, weighing as much as Beta(1, 1) (Beta(1, 1) before any)."""
        a, r = self.pooled[0] + PRIOR_ACCEPTED, self.pooled[1] + PRIOR_REJECTED
        weight = PRIOR_ACCEPTED + PRIOR_REJECTED
        return weight * a / (a + r), weight * r / (a + r)

    def _prior(self, live: int, draft: float, slots: float) -> float:
        """The prior's step time in plain steps (a plain step of ``live`` rows costs 1)."""
        return 1.0 + self.draft_share * draft + SLOT_SHARE * (slots / live - 1.0)

    def plain_weight(self, live: int) -> float:
        """How many plain steps of this size of live batch the fit holds, decayed as its other steps are."""
        fit = self.fits.get(live)
        return fit.xx[1][1] if fit is not None else 0.0

    def _fit(self, live: int) -> LiveFit:
        fit = self.fits.get(live)
        if fit is None:
            fit = self.fits[live] = LiveFit(live)
        return fit

    def observe(self, draft: int, slots: int, seconds: float, live: int | None = None) -> None:
        """One step of ``live`` rows (the whole batch if not said) with ``draft`` draft forwards and ``slots``
        verified slots took ``seconds``. The first step of each shape in a process is left out: it pays for what
        the shape costs once (kernel set-up, buffers), measured at 1.5–2× the shape's later steps on the CPU."""
        live = self.rows if live is None else live
        if (live, draft, slots) not in self.shapes:  # a shape's first step in a process pays its one-time costs
            self.shapes.add((live, draft, slots))
            return
        fit = self._fit(live)
        if fit.unit is None:
            fit.unit = seconds / self._prior(live, draft, slots)
        elif fit.fit is not None:  # a step far slower than predicted (a kernel warming up, a busy machine) counts
            seconds = min(seconds, 3.0 * self.seconds(draft, slots, live))  # as three times the prediction at most
        x = features(live, draft, slots)
        for i in range(FEATURES):
            fit.xt[i] = fit.xt[i] * COST_MEMORY + x[i] * seconds
            for j in range(FEATURES):
                fit.xx[i][j] = fit.xx[i][j] * COST_MEMORY + x[i] * x[j]
        fit.fit = None

    def seconds(self, draft: int, slots: int, live: int | None = None) -> float:
        """The predicted time of a step of ``live`` rows (the whole batch if not said); in plain steps of that many
        rows before a step of its size was measured."""
        live = self.rows if live is None else live
        fit = self.fits.get(live)
        if fit is None or fit.unit is None:
            return self._prior(live, draft, slots)
        if fit.fit is None:
            fit.fit = self._solve(fit)
        return max(sum(c * x for c, x in zip(fit.fit, features(live, draft, slots))), 1e-3 * fit.unit)

    def _solve(self, fit: LiveFit) -> list[float]:
        """The ridge solution: the measured steps' least squares, each coefficient held towards the prior's
        (scaled by ``unit``) with the weight of ``PRIOR_WEIGHT`` of a step whose feature is as large as it gets
        (``PLAIN_WEIGHT`` for the plain-step term, whose prior is 0)."""
        unit, rows = fit.unit, fit.rows
        prior = [unit * (1.0 - SLOT_SHARE), 0.0, unit * self.draft_share, unit * SLOT_SHARE / rows]
        weight = [PRIOR_WEIGHT, PLAIN_WEIGHT, PRIOR_WEIGHT * self.k_max ** 2,
                  PRIOR_WEIGHT * (rows * (self.k_max + 1)) ** 2]
        xx = [row[:] for row in fit.xx]
        xt = fit.xt[:]
        for i in range(FEATURES):
            xx[i][i] += weight[i]
            xt[i] += weight[i] * prior[i]
        return _solve(xx, xt)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting for the normal equations (positive definite by the ridge)."""
    n = len(b)
    m = [row[:] + [rhs] for row, rhs in zip(a, b)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


class AdaptiveLength:
    """``k="auto"``: the width of each step from :class:`Acceptance` and :class:`StepCosts`."""

    def __init__(self, rows: int, k_max: int, costs: StepCosts):
        self.k_max = k_max
        self.acceptance = Acceptance(rows, costs.acceptance_prior())
        self.costs = costs
        self.interval = costs.probe_interval()
        self.plain_run = self.interval - 2  # plain steps in a row (so the call's second plain step probes)

    def choose(self, reach: Sequence[int], forwards_per_position: int) -> int:
        """The width W ≤ max(reach) with the most expected emitted tokens per second (the smallest on a tie); a
        probe after a run of plain steps, and a plain step where the fit holds too few to price one (see the
        module's docstring)."""
        rows = range(len(reach))
        best = self._best([self.acceptance.rate(i) for i in rows], reach, forwards_per_position)
        if best or not max(reach, default=0):
            self.plain_run = 0
            if best and self.costs.plain_weight(len(reach)) < PLAIN_MIN:
                return 0
            return best
        self.plain_run += 1
        if self.plain_run < self.interval:
            return 0
        self.plain_run, self.interval = 0, self.costs.probe_interval()
        return 1

    def _best(self, rates: Sequence[float], reach: Sequence[int], forwards_per_position: int) -> int:
        """Σ_i expected_tokens(α_i, min(W, reach_i)) / t(W), maximised over W, with each row's terms α^W built up
        one width at a time (it runs every step, for every live row)."""
        rows = len(reach)
        terms = [1.0] * rows
        tokens = float(rows)
        best, best_rate = 0, tokens / self.costs.seconds(0, rows, rows) * (1.0 + GAIN_MARGIN)
        for width in range(1, min(self.k_max, max(reach, default=0)) + 1):
            for i in range(rows):
                if width <= reach[i]:
                    terms[i] *= rates[i]
                    tokens += terms[i]
            rate = tokens / self.costs.seconds(width * forwards_per_position, rows * (width + 1), rows)
            if rate > best_rate * (1.0 + 1e-9):
                best, best_rate = width, rate
        return best

    def observe_step(self, draft: int, slots: int, seconds: float, live: int) -> None:
        self.costs.observe(draft, slots, seconds, live)

    def observe_row(self, row: int, judged: int, kept: int) -> None:
        self.acceptance.observe(row, judged, kept)
        self.costs.observe_acceptance(judged, kept)

    def keep_rows(self, live: Sequence[int]) -> None:
        self.acceptance.keep_rows(live)

    def finish(self) -> None:
        """The call is over: keep what it measured for later processes."""
        self.costs.save()


class FixedLength:
    """``k=N``: every step proposes as many as it can, up to N (``reach`` is already capped by it)."""

    def choose(self, reach: Sequence[int], forwards_per_position: int) -> int:
        return max(reach, default=0)

    def observe_step(self, draft: int, slots: int, seconds: float, live: int) -> None:
        pass

    def observe_row(self, row: int, judged: int, kept: int) -> None:
        pass

    def keep_rows(self, live: Sequence[int]) -> None:
        pass

    def finish(self) -> None:
        pass


_COSTS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()  # target model → (key → costs)


def costs_for(target, draft, method: str, rows: int, k_max: int) -> StepCosts:
    """The step costs measured so far for this target, draft and method: in this process, else what an earlier
    process on this machine kept (:data:`STORE`), else a fresh prior."""
    per_target = _COSTS.setdefault(target, {})
    key = (method, id(draft), k_max, rows)  # a draft forward and a plain step cost more in a larger batch
    costs = per_target.get(key)
    if costs is None:
        costs = per_target[key] = StepCosts(draft_share(target, draft), rows, k_max,
                                            stored_key(target, draft, method, rows, k_max))
        if costs.key is not None:
            costs.restore(STORE.get(costs.key))
    return costs


STORE = MachineStore("step-costs.json")
"""``-k auto``'s step costs and pooled acceptance per pair, method, batch size and device, kept per machine, so that
a cold ``vocabcheck run`` starts from what the pair's earlier runs measured instead of from the prior."""


def stored_key(target, draft, method: str, rows: int, k_max: int) -> str | None:
    """The key of a pair's costs in :data:`STORE`: the models' directories (or hub ids), device, dtype, method,
    batch size and k_max; None for a model with no name (built in memory: nothing identifies it in a later
    process)."""
    names = []
    for model in (target, draft):
        if model is None:
            names.append("-")
            continue
        name = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
        if not name:
            return None
        names.append(str(name))
    parameter = next(target.parameters())
    return (f"{method}; {parameter.device.type} {str(parameter.dtype).removeprefix('torch.')}; batch {rows}; "
            f"k_max {k_max}; target {names[0]}; draft {names[1]}")


def draft_share(target, draft) -> float:
    """The prior cost of a draft forward relative to a target step: the draft's share of the pair's parameters,
    input embeddings left out (a lookup, not a product)."""
    if draft is None:
        return 0.0

    def weight(model) -> int:
        embedding = model.get_input_embeddings().weight
        return sum(p.numel() for p in model.parameters() if p is not embedding) or 1

    return min(1.0, max(0.01, weight(draft) / weight(target)))
