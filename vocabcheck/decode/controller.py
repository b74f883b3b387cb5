"""How many tokens to propose each step (``-k auto``): the width that maximises the expected emitted tokens per
second, from acceptance and costs measured while the call runs.

**What a step costs.** Rows are left-padded to the step's widest, so a verification of width W carries B·(W+1)
slots whatever each row proposed, and a draft model runs one forward of the whole batch per proposed position. A
step's time is modelled as

    t(W) = a + b·D + c·S        D = draft forwards (W for a draft model, 0 for a lookup), S = B·(W + 1) slots

(``a``: everything a plain step pays that does not grow with the width, host work included). :class:`StepCosts`
fits a, b, c by least squares over the steps so far, recent steps weighing more, each step timed from the previous
step's read-back to its own (the step's one host sync, so the timing adds none). A CPU, whose verification is
compute-bound, learns a large c; a GPU, memory-bound at these sizes, a small one: no table per device. Until there is
data, a prior stands in (three pseudo-steps, scaled by the first measured step): a draft forward costs the draft's
share of the pair's parameters, and each extra verified slot ``SLOT_SHARE`` of a row's plain step.

**What a step earns.** Row i accepts each proposal with probability α_i given the ones before it were accepted
(geometric, as in Leviathan et al.), so with w proposals it emits 1 + α_i + … + α_i^w tokens in expectation.
:class:`Acceptance` estimates α_i per row from what the row accepted and rejected, as a Beta posterior whose counts
decay (``MEMORY`` per step the row is verified with proposals, ``IDLE`` per step without), starting from a Beta(1, 1)
prior: no warm-up run (a later call on the same pair starts each row from what the earlier calls' rows accepted,
pooled, with the same weight as that prior). The idle decay lets a row that stopped proposing drift back to the prior, so a draft that
becomes useful again is tried again after a few dozen plain steps.

**The choice.** W = argmax over 0…k_max of Σ_i E_i(min(W, reach_i)) / t(W), where ``reach_i`` is what row i can
propose (its budget, and for a lookup what its match holds). Every row proposes up to W: a shorter row saves
nothing, because the step costs what its widest row costs. W = 0 is a plain step with no draft forward; the draft
catches up on what it skipped in its next proposal pass. The controller only decides how many tokens are proposed, so
the output is the target's own whatever it picks.

**Probing.** A plain step measures neither what proposals would earn nor what they would cost, so a controller that
chose W = 0 from its priors alone would never learn otherwise (at batch 16 on a CPU the prior's α = 0.5 does not pay
for the verification, though the demo draft's real α ≈ 0.8 does). So the second plain step of a call, and then every
``PROBE_AFTER``-th plain step in a row, proposes the width that is best under an optimistic α (the posterior mean
plus one standard deviation), at least 1. Where speculation does not pay, that costs about one verification of one
extra slot per ``PROBE_AFTER`` steps; where it does, the measured α and step times take over. Where the pair's pooled
acceptance is below 0.5 the run between probes grows in proportion, up to ``PROBE_MAX`` (a draft that almost never
agrees is probed rarely: each probe costs a verification and the draft's catch-up pass).
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
PRIOR_WEIGHT = 0.25  # weight of each of the prior's three pseudo-steps (a measured step weighs 1)
SLOT_SHARE = 0.15  # prior: one more verified slot per row costs this share of a plain step
POOL_MEMORY = 0.99  # weight kept per row verification by the pooled acceptance a new call's rows start from
PROBE_AFTER = 16  # plain steps in a row after which one step proposes, to measure what proposals earn and cost
PROBE_MAX = 128  # ... at most, where the pair's pooled acceptance is low


class Acceptance:
    """Per row, the decayed counts of accepted and rejected proposals, and α = the Beta posterior mean."""

    def __init__(self, rows: int, prior: tuple[float, float] = (PRIOR_ACCEPTED, PRIOR_REJECTED)):
        self.accepted = [0.0] * rows
        self.rejected = [0.0] * rows
        self.prior = prior

    def rate(self, row: int) -> float:
        a, r = self.accepted[row] + self.prior[0], self.rejected[row] + self.prior[1]
        return a / (a + r)

    def optimistic(self, row: int) -> float:
        """The posterior mean plus one standard deviation (at most 1): what a probe assumes."""
        a, r = self.accepted[row] + self.prior[0], self.rejected[row] + self.prior[1]
        mean = a / (a + r)
        return min(1.0, mean + (mean * (1.0 - mean) / (a + r + 1.0)) ** 0.5)

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


class StepCosts:
    """Least squares of step seconds on (1, draft forwards, verified slots), each older step's weight multiplied by
    ``COST_MEMORY`` per step, plus a prior of three pseudo-steps. Kept per pair and method for the life of the models
    (:func:`costs_for`), so later calls start from what earlier ones measured."""

    def __init__(self, draft_share: float, rows: int, k_max: int, key: str | None = None):
        self.draft_share, self.rows, self.k_max = draft_share, rows, k_max
        self.key = key  # where it is kept for later processes (STORE); None: not kept
        self.xx = [[0.0] * 3 for _ in range(3)]  # decayed sums of x·xᵀ and x·t
        self.xt = [0.0] * 3
        self.unit: float | None = None  # seconds of a plain step of ``rows`` rows, from the first measured step
        self.fit: list[float] | None = None
        self.pooled = [0.0, 0.0]  # every row's accepted and rejected proposals so far, decayed (POOL_MEMORY)

    def state(self) -> dict:
        return {"xx": self.xx, "xt": self.xt, "unit": self.unit, "pooled": self.pooled}

    def restore(self, state: object) -> bool:
        """Start from what an earlier process on this machine measured (:meth:`state`, kept in :data:`STORE`);
        anything else is ignored (False)."""
        try:
            xx = [[float(v) for v in row] for row in state["xx"]]
            xt = [float(v) for v in state["xt"]]
            pooled = [float(v) for v in state["pooled"]]
            unit = None if state["unit"] is None else float(state["unit"])
        except (TypeError, KeyError, ValueError, IndexError):
            return False
        values = [v for row in xx for v in row] + xt + pooled + ([unit] if unit is not None else [])
        if ([len(row) for row in xx] != [3, 3, 3] or len(xt) != 3 or len(pooled) != 2
                or not all(math.isfinite(v) for v in values) or min(pooled) < 0 or (unit is not None and unit <= 0)
                or min(xx[i][i] for i in range(3)) < 0):
            return False
        self.xx, self.xt, self.pooled, self.unit, self.fit = xx, xt, pooled, unit, None
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

    def _prior(self, draft: float, slots: float) -> float:
        """The prior's step time in plain steps (a plain step of ``rows`` rows costs 1)."""
        return 1.0 + self.draft_share * draft + SLOT_SHARE * (slots / self.rows - 1.0)

    def observe(self, draft: int, slots: int, seconds: float) -> None:
        if self.unit is None:
            self.unit = seconds / self._prior(draft, slots)
        elif self.fit is not None:  # a step far slower than predicted (a kernel warming up, a busy machine) counts
            seconds = min(seconds, 3.0 * self.seconds(draft, slots))  # as three times the prediction at most
        x = (1.0, float(draft), float(slots))
        for i in range(3):
            self.xt[i] = self.xt[i] * COST_MEMORY + x[i] * seconds
            for j in range(3):
                self.xx[i][j] = self.xx[i][j] * COST_MEMORY + x[i] * x[j]
        self.fit = None

    def seconds(self, draft: int, slots: int) -> float:
        """The predicted time of a step (in plain steps of ``rows`` rows before anything was measured)."""
        if self.unit is None:
            return self._prior(draft, slots)
        if self.fit is None:
            self.fit = self._solve()
        a, b, c = self.fit
        return max(a + b * draft + c * slots, 1e-3 * self.unit)

    def _solve(self) -> list[float]:
        xx = [row[:] for row in self.xx]
        xt = self.xt[:]
        wide = self.k_max * self.rows
        for draft, slots in ((0, self.rows), (0, self.rows + wide), (self.k_max, self.rows)):
            x = (1.0, float(draft), float(slots))
            t = self.unit * self._prior(draft, slots)
            for i in range(3):
                xt[i] += PRIOR_WEIGHT * x[i] * t
                for j in range(3):
                    xx[i][j] += PRIOR_WEIGHT * x[i] * x[j]
        return _solve3(xx, xt)


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting for the 3×3 normal equations (positive definite by the prior)."""
    m = [row[:] + [rhs] for row, rhs in zip(a, b)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            for c in range(col, 4):
                m[r][c] -= f * m[col][c]
    x = [0.0] * 3
    for r in (2, 1, 0):
        x[r] = (m[r][3] - sum(m[r][c] * x[c] for c in range(r + 1, 3))) / m[r][r]
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
        probe after a run of plain steps (see the module's docstring)."""
        rows = range(len(reach))
        best = self._best([self.acceptance.rate(i) for i in rows], reach, forwards_per_position)
        if best or not max(reach, default=0):
            self.plain_run = 0
            return best
        self.plain_run += 1
        if self.plain_run < self.interval:
            return 0
        self.plain_run, self.interval = 0, self.costs.probe_interval()
        return max(1, self._best([self.acceptance.optimistic(i) for i in rows], reach, forwards_per_position))

    def _best(self, rates: Sequence[float], reach: Sequence[int], forwards_per_position: int) -> int:
        """Σ_i expected_tokens(α_i, min(W, reach_i)) / t(W), maximised over W, with each row's terms α^W built up
        one width at a time (it runs every step, for every live row)."""
        rows = len(reach)
        terms = [1.0] * rows
        tokens = float(rows)
        best, best_rate = 0, tokens / self.costs.seconds(0, rows)
        for width in range(1, min(self.k_max, max(reach, default=0)) + 1):
            for i in range(rows):
                if width <= reach[i]:
                    terms[i] *= rates[i]
                    tokens += terms[i]
            rate = tokens / self.costs.seconds(width * forwards_per_position, rows * (width + 1))
            if rate > best_rate * (1.0 + 1e-9):
                best, best_rate = width, rate
        return best

    def observe_step(self, draft: int, slots: int, seconds: float) -> None:
        self.costs.observe(draft, slots, seconds)

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

    def observe_step(self, draft: int, slots: int, seconds: float) -> None:
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
