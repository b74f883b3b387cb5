"""What a step costs, for ``-k auto`` (:mod:`.controller` chooses the width from it).

Rows are left-padded to the step's widest, so a verification of width W carries B·(W+1) slots, and a draft model runs
one forward of the whole batch per proposed position. A step of B live rows is modelled as

    t(W) = a + p·[W = 0] + b·D + c·S + e·C   D = draft forwards (W for a draft model, 0 for a lookup), S = B·(W + 1),
                                             C = what a draft's proposal pass caught up on first, beyond the two
                                             positions a proposing step leaves it: 0 but after plain steps

(``a``: what every step pays; ``p``: what a plain step pays apart; ``e``: a draft's catch-up). :class:`StepCosts` fits
a, p, b, c, e by least squares over the steps so far, one fit per number of live rows, older steps decaying by
``cost_memory`` a step. A small ridge (``prior_weight``, ``plain_weight``) holds each coefficient to a prior scaled by
the first measured step: a draft forward costs the draft's share of the pair's parameters, each extra verified slot
``slot_share`` of a row's plain step, a caught-up position ``catch_up_share`` of a draft forward; no coefficient is
below zero. A width is priced for a draft that is caught up (C = 0).

**Samples.** The first step of each shape (live rows, draft forwards, slots) in a process is left out if plain and
weighs ``first_weight`` if proposing (it pays once for the shape).

**Pricing a plain step.** Where the fit holds fewer than ``plain_min`` (decayed) plain steps of the step's size of
batch, the controller steps plain to measure one (:meth:`StepCosts.priced`). A smaller batch met at a call's end is
priced from the smallest larger batch whose fit measured plain and proposing steps (:meth:`StepCosts.donor`) until
its own has.

**Kept state.** What a call measured is kept per machine (:data:`STORE`, ``step-costs.json``) and a later process starts
from it; values no machine could have measured (``kept_unit_s``, ``kept_bound``) are ignored, and a fit that cannot
be solved falls back to the prior.

How each of these rules was found, with the figures, is docs/k-auto-findings.md.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

from ..cpu.measured import MachineStore, debug_note
from .tuning import TUNING



FEATURES = 5  # a step's x: 1, whether it is a plain step, draft forwards, verified slots, caught-up positions
CATCH_UP = 4  # the caught-up positions' index in x


def features(live: int, draft: int, slots: int, catch_up: int = 0) -> tuple[float, ...]:
    """A step's x: 1, whether it is a plain step (one slot per live row), draft forwards, verified slots, and the
    positions its draft caught up on before proposing beyond the two a proposing step leaves it (0 but after plain
    steps: counted from one, the steps of narrow widths, whose rows more often accept every proposal and owe two,
    were told apart from wide ones by it, and the fit's widths bent with it)."""
    return 1.0, 1.0 if slots <= live else 0.0, float(draft), float(slots), float(catch_up)


class LiveFit:
    """The step-time fit for one number of live rows: decayed sums of x·xᵀ and x·t over x = (1, plain step, draft
    forwards, slots, caught-up positions), and ``unit``, the seconds of a plain step at that size (from its first
    measured step)."""

    def __init__(self, rows: int):
        self.rows = rows  # live rows, the prior's scale for slots
        self.xx = [[0.0] * FEATURES for _ in range(FEATURES)]
        self.xt = [0.0] * FEATURES
        self.unit: float | None = None
        self.fit: list[float] | None = None  # the coefficients, solved for the sums as they are (None: not yet)
        self.solved: list[float] | None = None  # the last coefficients solved, perhaps a few steps old

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
        if ([len(row) for row in xx] != [FEATURES] * FEATURES or len(xt) != FEATURES
                or not all(math.isfinite(v) and abs(v) <= TUNING.kept_bound for v in [*xt, *(v for row in xx for v in row)])
                or not TUNING.kept_unit_s[0] <= unit <= TUNING.kept_unit_s[1] or not _measurable(xx, xt)):
            return None  # not something this machine could have measured: measured again instead
        fit = cls(rows)
        fit.xx, fit.xt, fit.unit = xx, xt, unit
        return fit


def _measurable(xx: list[list[float]], xt: list[float]) -> bool:
    """Whether decayed sums could come from measured steps: at most 1 / (1 - ``cost_memory``) steps' weight, as many
    plain steps at most, no negative square, each cross sum within what its two squares allow (Cauchy–Schwarz), and
    seconds under ``kept_unit_s``'s ten minutes a step."""
    steps = xx[0][0]
    return (0.0 <= xx[1][1] <= steps <= 1.0 / (1.0 - TUNING.cost_memory) + 1e-6
            and all(xx[i][i] >= 0.0 for i in range(FEATURES))
            and all(xx[i][j] ** 2 <= xx[i][i] * xx[j][j] * (1.0 + 1e-6) + 1e-12
                    for i in range(FEATURES) for j in range(FEATURES))
            and 0.0 <= xt[0] <= steps * TUNING.kept_unit_s[1] * 3.0)


class StepCosts:
    """What steps cost for one pair, method and batch size: a fit per number of live rows (:class:`LiveFit`: a
    CPU's step is not linear in its rows, and the rows leaving at a call's end must not bend the full batch's fit;
    even 12 and 16 rows differed), by least squares with each older step's weight multiplied by ``TUNING.cost_memory``
    per step, held to a prior by a small ridge; and the pair's acceptance pooled over rows and calls. Kept per
    pair and method for the life of the models (:func:`costs_for`), so later calls start from what earlier ones
    measured, and on disk for later processes (:data:`STORE`)."""

    def __init__(self, draft_share: float, rows: int, k_max: int, key: str | None = None):
        self.draft_share, self.rows, self.k_max = draft_share, rows, k_max
        self.key = key  # where it is kept for later processes (STORE); None: not kept
        self.fits: dict[int, LiveFit] = {}  # live rows → fit
        self.shapes: set[tuple[int, int, int]] = set()  # (live rows, draft forwards, slots) stepped in this process
        self.pooled = [0.0, 0.0]  # every row's accepted and rejected proposals so far, decayed (TUNING.pool_memory)
        # what became of what an earlier process kept (..metrics.KEPT_STATES); which of it this process has not yet checked
        # against its own steps: the sizes of batch whose kept fit has priced no measured step, and the kept acceptance
        self.kept = "none"
        self.unchecked: set[int] = set()
        self.kept_pool: list[float] | None = None
        self.fresh = [0.0, 0.0, 0]  # this process's accepted and rejected proposals and row verifications, undecayed
        # plain steps in a row since the last proposing step, kept across calls and processes: a pair that cannot pay
        # (AdaptiveLength.written_off) is re-tried after a bounded number of plain steps, not at every call's start
        self.idle = 0
        self.replacements = 0  # kept fits and acceptance replaced so far: a choice made on them is made again

    @property
    def unit(self) -> float | None:
        """Seconds of a plain step of the whole batch (None before one was measured)."""
        fit = self.fits.get(self.rows)
        return fit.unit if fit is not None else None

    def state(self) -> dict:
        return {"fits": {str(live): fit.state() for live, fit in self.fits.items() if fit.unit is not None},
                "pooled": self.pooled, "idle": self.idle}

    def restore(self, state: object) -> bool:
        """Start from what an earlier process on this machine measured (:meth:`state`, kept in :data:`STORE`), as a
        hint: each kept fit is checked against the first step it prices (:meth:`observe`) and the kept acceptance
        against this process's verifications (:meth:`observe_acceptance`). Anything no process could have measured
        is ignored (False)."""
        try:
            pooled = [float(v) for v in state["pooled"]]
            kept = state["fits"]
            fits = {int(live): LiveFit.restored(int(live), value) for live, value in kept.items()}
            idle = state.get("idle")
        except (TypeError, KeyError, ValueError, AttributeError):
            return False
        most = 1.0 / (1.0 - TUNING.pool_memory) + 1e-6  # decayed verifications, each adding at most k_max and 1
        if (len(pooled) != 2 or not all(math.isfinite(v) and v >= 0 for v in pooled) or None in fits.values()
                or pooled[0] > most * self.k_max or pooled[1] > most
                or not all(0 < live <= self.rows for live in fits)
                or not (idle is None or (type(idle) is int and 0 <= idle <= TUNING.retry_after))):
            return False
        self.fits, self.pooled, self.idle = fits, pooled, idle or 0
        self.unchecked, self.kept_pool = set(fits), pooled[:]
        return True

    def save(self) -> None:
        if self.key is not None and self.unit is not None:
            STORE.put(self.key, self.state())

    def observe_acceptance(self, judged: int, kept: int) -> bool:
        """One row's verification, pooled over rows and calls. The first ``TUNING.kept_check_rows`` of a process
        check the kept acceptance: where they make it ``e^kept_llr`` times less likely than their own rate does
        (:func:`log_likelihood`), the pooled counts restart from this process's (a kept acceptance of 0 for a good draft
        is replaced at its first accepted probe). True where it replaced them."""
        if not judged:
            return False
        rejected = 1.0 if kept < judged else 0.0
        self.pooled = [self.pooled[0] * TUNING.pool_memory + kept, self.pooled[1] * TUNING.pool_memory + rejected]
        fresh = self.fresh = [self.fresh[0] + kept, self.fresh[1] + rejected, self.fresh[2] + 1]
        if self.kept_pool is None:
            return False
        if fresh[2] > TUNING.kept_check_rows:
            self.kept_pool = None
            return False
        a, r = self.kept_pool
        if (log_likelihood(fresh[0], fresh[1], (fresh[0] + 1) / (fresh[0] + fresh[1] + 2))
                - log_likelihood(fresh[0], fresh[1], (a + 1) / (a + r + 2)) > TUNING.kept_llr):
            debug_note(f"kept acceptance {(a + 1) / (a + r + 2):.2f} disagrees with this run's "
                       f"{fresh[0]:.0f} accepted / {fresh[1]:.0f} rejected: replaced")
            self.pooled, self.kept_pool, self.kept = fresh[:2], None, "replaced"
            self.replacements += 1
            return True
        return False

    @property
    def pool_unchecked(self) -> bool:
        """Whether the pooled acceptance comes from an earlier process and no verification of this one has yet
        checked it."""
        return self.kept_pool is not None and self.fresh[2] == 0

    def acceptance_prior(self) -> tuple[float, float]:
        """A new row's prior: the pooled acceptance, weighing as much as Beta(1, 1) (Beta(1, 1) before any)."""
        a, r = self.pooled[0] + TUNING.prior_accepted, self.pooled[1] + TUNING.prior_rejected
        weight = TUNING.prior_accepted + TUNING.prior_rejected
        return weight * a / (a + r), weight * r / (a + r)

    def _prior(self, live: int, draft: float, slots: float) -> float:
        """The prior's step time in plain steps (a plain step of ``live`` rows costs 1)."""
        return 1.0 + self.draft_share * draft + TUNING.slot_share * (slots / live - 1.0)

    def plain_weight(self, live: int) -> float:
        """How many plain steps of this size of live batch the fit holds, decayed as its other steps are."""
        fit = self.fits.get(live)
        return fit.xx[1][1] if fit is not None else 0.0

    def _fit(self, live: int) -> LiveFit:
        fit = self.fits.get(live)
        if fit is None:
            fit = self.fits[live] = LiveFit(live)
        return fit

    def observe(self, draft: int, slots: int, seconds: float, live: int | None = None, catch_up: int = 0) -> None:
        """One step of ``live`` rows (the whole batch if not said) with ``draft`` draft forwards and ``slots`` verified
        slots, its draft having caught up on ``catch_up`` positions first (:func:`features`), took ``seconds``. The
        first step of each shape in a process pays for what the shape costs once (kernel set-up, buffers: 1.1–1.5× the
        shape's later steps on the CPU): a plain one is left out (a plain step priced too high makes every width look
        better than it is), a proposing one weighs ``TUNING.first_weight`` (priced too high, it errs towards plain steps; left
        out, the widths a fresh process tries first went unmeasured while the controller widened them on the prior's
        prices)."""
        live = self.rows if live is None else live
        if catch_up > TUNING.catch_up_fit_max:
            # after a long run of plain steps, or a call's first proposal (the draft reads the prompt then): one long
            # forward, which the linear catch-up term prices badly; fitted, a written-off pair's probe after 500 plain
            # steps made its draft forward look cheap, and the pair was probed every 16 steps until it looked dear again
            return
        weight = 1.0
        if (live, draft, slots) not in self.shapes:  # a shape's first step in a process pays its one-time costs
            self.shapes.add((live, draft, slots))
            if slots <= live:
                return
            weight = TUNING.first_weight
        fit = self._fit(live)
        if live in self.unchecked:  # a kept fit's first priced step: kept only if it priced it within a factor
            self.unchecked.discard(live)
            predicted = self._seconds(draft, slots, live, catch_up)
            if not 1.0 / TUNING.kept_disagree <= seconds / predicted <= TUNING.kept_disagree:
                fit = self.fits[live] = LiveFit(live)
                self.kept = "replaced"
                self.replacements += 1
                debug_note(f"kept step costs of {live} rows priced a {seconds:.4g} s step at {predicted:.4g}: replaced")
        if fit.unit is None:
            fit.unit = seconds / self._prior(live, draft, slots)
        else:  # a step far slower than predicted (a kernel warming up, a busy machine) counts as three times the
            # prediction at most (the last coefficients solved will do: no solve per step where nothing is priced)
            seconds = min(seconds, 3.0 * self._seconds(draft, slots, live, catch_up, recent=True))
        x = features(live, draft, slots, catch_up)
        for i in range(FEATURES):
            fit.xt[i] = fit.xt[i] * TUNING.cost_memory + weight * x[i] * seconds
            for j in range(FEATURES):
                fit.xx[i][j] = fit.xx[i][j] * TUNING.cost_memory + weight * x[i] * x[j]
        fit.fit = None

    def stepped_plain(self, live: int) -> bool:
        """Whether this process stepped plain with ``live`` rows and the fit holds a plain step of that size (a
        shape's first step is left out)."""
        return (live, 0, live) in self.shapes and self.plain_weight(live) > 0

    def priced(self, live: int) -> bool:
        """Whether the fit for ``live`` rows holds enough plain steps (``TUNING.plain_min``) to price a plain step."""
        return self.plain_weight(live) >= TUNING.plain_min

    def donor(self, live: int) -> int | None:
        """The live count whose fit prices steps of ``live`` rows while their own cannot (:meth:`priced`): the
        smallest larger one that measured plain and proposing steps (a batch's last rows, each size met for a few
        steps at a call's end). Never a smaller one: on a CPU a width costs fewer plain steps the fewer the rows
        (7 rows: width 3 at 2.6 plain steps, 16 rows: 3.0), so a larger batch's prices err towards plain steps. A
        batch that this process stepped plain stays a donor after its plain steps have decayed: where its widths win
        by ``TUNING.plain_sure`` it no longer steps plain, and losing it as a donor sent its last rows to plain steps (at
        batch 4 on the demo pair, 20–29 plain steps of a call's last rows where k = 4 took none)."""
        return next((other for other in sorted(self.fits) if other > live and self._measured(other, 0.0)
                     and (self.plain_weight(other) >= TUNING.donor_plain or self.stepped_plain(other))), None)

    def _measured(self, live: int, plain: float) -> bool:
        """Whether the fit for ``live`` rows holds at least ``plain`` plain steps and ``TUNING.donor_proposing`` proposing
        ones (decayed)."""
        fit = self.fits.get(live)
        return (fit is not None and fit.unit is not None and fit.xx[1][1] >= plain
                and fit.xx[0][0] - fit.xx[1][1] >= TUNING.donor_proposing)

    def seconds(self, draft: int, slots: int, live: int | None = None) -> float:
        """The predicted time of a step of ``live`` rows (the whole batch if not said): :meth:`pricer`'s."""
        return self.pricer(live)(draft, slots)

    def pricer(self, live: int | None = None) -> Callable[[int, int], float]:
        """The predicted time of a step of ``live`` rows (the whole batch if not said) as a function of its draft
        forwards and verified slots, with which fit prices it chosen once; in plain steps of that many rows before a
        step of its size was measured. Where the fit for ``live`` rows cannot price a plain step but a larger
        batch's can (:meth:`donor`), or it measured no proposing step, a width is priced as a plain step (its own
        where it measured one, else that batch's) and what the width adds in that batch, in proportion to the rows
        (what a width adds is its slots and its draft forwards' rows: on the demo pair, width 1 at 8 rows priced at
        34 ms where it ran at 27–31 ms, with the same width's ratio instead at 2 plain steps)."""
        live = self.rows if live is None else live
        other = None if self._measured(live, TUNING.plain_min) else self.donor(live)
        if other is None:
            return lambda draft, slots: self._seconds(draft, slots, live)
        base = self._seconds(0, other, other)
        plain = self._seconds(0, live, live) if self.plain_weight(live) >= TUNING.donor_plain else base

        def priced(draft: int, slots: int) -> float:
            if slots <= live:
                return plain
            extra = self._seconds(draft, other * (slots // live), other) - base
            return plain + max(0.0, extra) * live / other

        return priced

    def _seconds(self, draft: int, slots: int, live: int, catch_up: int = 0, recent: bool = False) -> float:
        """``recent``: the last coefficients solved may be a few steps old."""
        fit = self.fits.get(live)
        if fit is None or fit.unit is None:
            return self._prior(live, draft, slots)
        coefficients = fit.fit if fit.fit is not None or not recent else fit.solved
        if coefficients is None:
            coefficients = fit.fit = fit.solved = self._solve_or_restart(fit, live)
            if coefficients is None:
                return self._prior(live, draft, slots)
        return max(sum(c * x for c, x in zip(coefficients, features(live, draft, slots, catch_up))), 1e-3 * fit.unit)

    def _solve_or_restart(self, fit: LiveFit, live: int) -> list[float] | None:
        """The fit's coefficients; where the normal equations cannot be solved to finite values (a kept state no
        process measured), None, and the fit starts over from the next measured step: never a crash, and never kept."""
        try:
            solved = self._solve(fit)
        except (ZeroDivisionError, OverflowError):
            solved = []
        if len(solved) == FEATURES and all(math.isfinite(v) for v in solved):
            return solved
        self.fits[live] = LiveFit(live)
        self.unchecked.discard(live)
        self.kept = "replaced"
        self.replacements += 1
        return None

    def _solve(self, fit: LiveFit) -> list[float]:
        """The ridge solution: the measured steps' least squares, each coefficient held towards the prior's
        (scaled by ``unit``) with the weight of ``TUNING.prior_weight`` of a step whose feature is as large as it gets
        (``TUNING.plain_weight`` for the plain-step term, whose prior is 0)."""
        unit, rows = fit.unit, fit.rows
        prior = [unit * (1.0 - TUNING.slot_share), 0.0, unit * self.draft_share, unit * TUNING.slot_share / rows,
                 unit * self.draft_share * TUNING.catch_up_share]
        weight = [TUNING.prior_weight, TUNING.plain_weight, TUNING.prior_weight * self.k_max ** 2,
                  TUNING.prior_weight * (rows * (self.k_max + 1)) ** 2, TUNING.prior_weight * TUNING.catch_up_scale ** 2]
        xx = [row[:] for row in fit.xx]
        xt = fit.xt[:]
        for i in range(FEATURES):
            xx[i][i] += weight[i]
            xt[i] += weight[i] * prior[i]
        solved = _solve(xx, xt)
        if solved[CATCH_UP] >= 0.0:
            return solved
        # a catch-up never makes a step cheaper: where the fit says so, it is explaining probes that ran cheaper than
        # the widths' line (in a run of plain steps width 1 is measured only with a catch-up), and width 1 should
        # take that price instead
        kept = [i for i in range(FEATURES) if i != CATCH_UP]
        solved = _solve([[xx[i][j] for j in kept] for i in kept], [xt[i] for i in kept])
        return solved[:CATCH_UP] + [0.0] + solved[CATCH_UP:]


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
            aside = STORE.set_aside
            kept = STORE.get(costs.key)
            if kept is not None:
                costs.kept = "used" if costs.restore(kept) else "discarded"
                if costs.kept == "discarded":
                    debug_note(f"kept step costs for {costs.key} discarded: not what a run could have measured")
            elif STORE.set_aside > aside:
                costs.kept = "discarded"
    return costs


def log_likelihood(accepted: float, rejected: float, alpha: float) -> float:
    """log P(verifications | α) under the geometric model: each accepted proposal α, each rejection (1 - α)."""
    alpha = min(max(alpha, 1e-9), 1.0 - 1e-9)
    return accepted * math.log(alpha) + rejected * math.log(1.0 - alpha)


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
