"""How many tokens to propose each step (``-k auto``): the width that maximises the expected emitted tokens per second,
from acceptance and costs measured while the call runs.

What a step costs is :mod:`vocabcheck.decode.auto.costs`: a fit of step times per number of live rows, measured while the
call runs, kept for the pair's later calls and processes.

**What a step earns.** Row i accepts each proposal with probability α_i given the ones before it were accepted
(geometric, as in Leviathan et al.), so with w proposals it emits 1 + α_i + … + α_i^w tokens in expectation.
:class:`Acceptance` estimates α_i per row from what the row accepted and rejected, as a Beta posterior whose counts
decay (``TUNING.memory`` per step the row is verified with proposals, ``TUNING.idle`` per step without), starting from a Beta(1, 1)
prior: no warm-up run (a later call on the same pair starts each row from what the earlier calls' rows accepted,
pooled, with the same weight as that prior). The idle decay lets a row that stopped proposing drift back to the prior,
so a draft that becomes useful again is tried again after a few dozen plain steps.

**The choice.** W = argmax over 0…k_max of Σ_i E_i(min(W, reach_i)) / t(W), where ``reach_i`` is what row i can
propose (its budget, and for a lookup what its match holds), and W > 0 only where it promises ``TUNING.gain_margin`` more
than a plain step (a smaller predicted gain is within the fit's error, and a wrong guess costs more than it could
earn) — to start proposing. A controller that proposed at the previous step goes on while the best width promises at
least a plain step's rate: stopping has a cost the model does not see, since a plain step measures no acceptance,
and a run of rejections that dipped the rows' rates just below the margin then kept the batch plain until the next
probe (the demo pair's draft at batch 4, replayed from the prior on measured step times by
``benchmarks/replay_controller.py``: 1.01× the TPOT of k = 4, 1.17× in the first pass; proposing on, 0.99× and
1.09×). Every row proposes up to W: a shorter row saves nothing, because the step costs what its widest row costs. W =
0 is a plain step with no draft forward; the draft catches up on what it skipped in its next proposal pass. The
controller only decides how many tokens are proposed, so the output is the target's own whatever it picks.

Where the fit for the step's size of batch holds too few plain steps to price one and no larger batch's fit can
(:meth:`vocabcheck.decode.auto.costs.StepCosts.priced`, ``donor``), the step is plain, unless this process measured a plain
step of that size and the best width promises ``TUNING.plain_sure`` times its rate: a plain step mispriced by that much is
not what decides the choice, and measuring it again every ~23 steps cost 7 % of a batch-1 call on the CPU (11 plain
steps in 243, each 14 ms for one token where a width of 4 emitted 4 in 24 ms).

**Probing.** A plain step measures neither what proposals would earn nor what they would cost, so a controller that
chose W = 0 from its priors alone would never learn otherwise (at batch 16 on a CPU the prior's α = 0.5 does not pay
for the verification, though the demo draft's real α ≈ 0.8 does). So the second plain step of a call, and then every
``TUNING.probe_after``-th plain step in a row, proposes one token per row: the cheapest width that measures each row's
acceptance and what a proposing step costs (a probe at the width best under an optimistic α reached W = 8 at batch 16
on the CPU, seven plain steps' time, for a measurement the fit extends to every width anyway). Where speculation does
not pay, that costs about one verification of one extra slot per ``TUNING.probe_after`` steps; where it does, the measured α
and step times take over. Where the pair's pooled acceptance is below 0.5 the run between probes grows in proportion,
up to ``TUNING.probe_max`` (a draft that almost never agrees is probed rarely: each probe costs a verification and the
draft's catch-up pass), and so is a new call's first probe (after ``2 + interval − PROBE_AFTER`` plain steps instead
of 2: a batch of 4 rows of a draft that never agreed paid 2 % for its calls' early probes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .costs import StepCosts
from .tuning import TUNING



class Acceptance:
    """Per row, the decayed counts of accepted and rejected proposals, and α = the Beta posterior mean."""

    def __init__(self, rows: int, prior: tuple[float, float] = (TUNING.prior_accepted, TUNING.prior_rejected)):
        self.accepted = [0.0] * rows
        self.rejected = [0.0] * rows
        self.prior = prior

    def rate(self, row: int) -> float:
        a, r = self.accepted[row] + self.prior[0], self.rejected[row] + self.prior[1]
        return a / (a + r)

    def observe(self, row: int, judged: int, kept: int) -> None:
        """The row's proposals that counted (``judged``) and how many it accepted; a rejection where fewer."""
        keep = TUNING.memory if judged else TUNING.idle
        self.accepted[row] = self.accepted[row] * keep + kept
        self.rejected[row] = self.rejected[row] * keep + (1.0 if kept < judged else 0.0)

    def keep_rows(self, live: Sequence[int]) -> None:
        self.accepted = [self.accepted[i] for i in live]
        self.rejected = [self.rejected[i] for i in live]


def expected_tokens(alpha: float, width: int) -> float:
    """1 + α + … + α^width: the tokens a row emits in expectation with ``width`` proposals."""
    return sum(alpha ** j for j in range(width + 1))


def probe_interval(costs: StepCosts) -> int:
    """Plain steps in a row before a probe: ``TUNING.probe_after`` while the pair's pooled acceptance is 0.5 or more, longer
    in proportion below it, ``TUNING.probe_max`` at most."""
    a, r = costs.acceptance_prior()
    alpha = a / (a + r)
    return int(min(TUNING.probe_max, TUNING.probe_after / min(1.0, max(2.0 * alpha, TUNING.probe_after / TUNING.probe_max))))


class AdaptiveLength:
    """``k="auto"``: the width of each step from :class:`Acceptance` and :class:`StepCosts`."""

    def __init__(self, rows: int, k_max: int, costs: StepCosts, unsettled: Callable[[], int] = lambda: 0):
        """``unsettled``: a count that grows while a step's time is not what the same step will cost later (the CPU
        head still choosing a kernel for a size: :func:`vocabcheck.decode.cpu.head.unsettled_calls`); a step during which
        it grew is no sample for the cost fit."""
        self.k_max = k_max
        self.unsettled, self.settled_at = unsettled, unsettled()
        self.acceptance = Acceptance(rows, costs.acceptance_prior())
        self.costs = costs
        self.interval = probe_interval(costs)
        # plain steps in a row: the call's second plain step probes, later where the pair's acceptance is low
        self.plain_run = TUNING.probe_after - 2
        self.proposing = False  # whether the last step that could propose did: it goes on without the margin

    def choose(self, reach: Sequence[int], forwards_per_position: int) -> int:
        """The width W ≤ max(reach) with the most expected emitted tokens per second (the smallest on a tie); a
        probe after a run of plain steps, and a plain step where the fit holds too few to price one (see the
        module's docstring)."""
        width = self._choice(reach, forwards_per_position)
        if max(reach, default=0):  # a step with nothing to propose (no lookup matched) is no choice to stop
            self.proposing = width > 0
        return width

    def _choice(self, reach: Sequence[int], forwards_per_position: int) -> int:
        rows = range(len(reach))
        margin = 0.0 if self.proposing else TUNING.gain_margin
        best, gain = self._best([self.acceptance.rate(i) for i in rows], reach, forwards_per_position, margin)
        if best or not max(reach, default=0):
            self.plain_run = 0
            if best and not self._plain_priced(len(reach), gain):
                return 0
            return best
        self.plain_run += 1
        if self.plain_run < self.interval:
            return 0
        self.plain_run, self.interval = 0, probe_interval(self.costs)
        return 1

    def _plain_priced(self, live: int, gain: float) -> bool:
        """Whether a plain step of ``live`` rows is priced well enough to propose on: the fit for that size holds
        ``TUNING.plain_min`` plain steps, or a larger batch's prices it (:meth:`StepCosts.donor`), or this process stepped
        plain at that size and the best width promises ``TUNING.plain_sure`` times a plain step's rate (a plain step priced
        that far off is not what decides the choice; measuring it again cost 7 % at batch 1 on the CPU)."""
        return (self.costs.priced(live) or self.costs.donor(live) is not None
                or (gain >= TUNING.plain_sure and self.costs.stepped_plain(live)))

    def _best(self, rates: Sequence[float], reach: Sequence[int], forwards_per_position: int,
              margin: float = TUNING.gain_margin) -> tuple[int, float]:
        """Σ_i expected_tokens(α_i, min(W, reach_i)) / t(W), maximised over W > 0 where it beats a plain step's rate
        by ``margin`` (else 0), with each row's terms α^W built up one width at a time (it runs every step, for every
        live row); and that rate over a plain step's."""
        rows = len(reach)
        terms = [1.0] * rows
        tokens = float(rows)
        price = self.costs.pricer(rows)  # which fit prices this size of batch, resolved once for every width
        plain_rate = tokens / price(0, rows)
        best, best_rate = 0, plain_rate * (1.0 + margin)
        for width in range(1, min(self.k_max, max(reach, default=0)) + 1):
            for i in range(rows):
                if width <= reach[i]:
                    terms[i] *= rates[i]
                    tokens += terms[i]
            rate = tokens / price(width * forwards_per_position, rows * (width + 1))
            if rate > best_rate * (1.0 + 1e-9):
                best, best_rate = width, rate
        return best, best_rate / plain_rate

    def observe_step(self, draft: int, slots: int, seconds: float | None, live: int, catch_up: int = 0) -> None:
        """A step's time (None for a call's first step, which pays for the prefill's tail): a sample for the cost
        fit unless the step ran through a kernel not chosen yet."""
        now = self.unsettled()
        if seconds is not None and now == self.settled_at:
            self.costs.observe(draft, slots, seconds, live, catch_up)
        self.settled_at = now

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

    def observe_step(self, draft: int, slots: int, seconds: float | None, live: int, catch_up: int = 0) -> None:
        pass

    def observe_row(self, row: int, judged: int, kept: int) -> None:
        pass

    def keep_rows(self, live: Sequence[int]) -> None:
        pass

    def finish(self) -> None:
        pass
