"""How many tokens to propose each step (``-k auto``): the width that maximises the expected emitted tokens per second,
from acceptance and costs measured while the call runs. Its constants are :data:`.tuning.TUNING`; how each rule was
found, with the measurements, is docs/k-auto-findings.md.

**What a step earns.** Row i accepts each proposal with probability α_i given the ones before it were accepted
(geometric), so with w proposals it emits 1 + α_i + … + α_i^w tokens in expectation. :class:`Acceptance` estimates α_i
per row as a Beta posterior whose counts decay (``memory`` per step the row is verified with proposals, ``idle`` per
step without) from a Beta(1, 1) prior, or from the pair's pooled acceptance of earlier calls with the same weight.

**The choice.** W = argmax over 0…k_max of Σ_i E_i(min(W, reach_i)) / t(W), where ``reach_i`` is what row i can
propose and t is :mod:`.costs`' price. To start proposing, W > 0 must promise ``gain_margin`` more than a plain step;
a controller that proposed at the previous step goes on while the best width promises at least a plain step's rate.
Every row proposes up to W. W = 0 is a plain step; the draft catches up on what it skipped in its next proposal pass.
The controller only decides how many tokens are proposed: the output is the target's own whatever it picks.

Where the fit for the step's size of batch cannot price a plain step (:meth:`.costs.StepCosts.priced`, ``donor``), the
step is plain, unless this process measured a plain step of that size and the best width promises ``plain_sure``
times its rate.

**Probing.** A plain step measures neither what proposals earn nor what they cost, so the call's second plain step,
and then every ``probe_after``-th plain step in a row, proposes one token per row. Where the pair's pooled acceptance
is below 0.5 the run between probes (and before a new call's first probe) grows in proportion, up to ``probe_max``;
a process's first call probes at its second plain step while the acceptance an earlier process kept is unchecked
(unless the pair is written off at an acceptance of 1: then the probe has nothing to find).

**A pair that cannot pay.** Where no width beats a plain step even if every row accepted at the pair's pooled
acceptance plus ``optimism_sd`` standard deviations (:meth:`AdaptiveLength.written_off`: a draft whose forward costs
about a target step cannot pay at any acceptance), a probe is not worth its price (the draft's catch-up on every
position it skipped, then its pass and a wider verification): the run of plain steps goes on to ``retry_after``,
counted across calls and, through the kept state, processes (:attr:`.costs.StepCosts.idle`), so the pair is re-tried
after at most ``retry_after`` plain steps, never written off for good. The steps of such a run price nothing (the
write-off holds until the probe, or until a kept fit it was found on is replaced).

**Samples.** A step's time is a sample for the cost fit unless it is a call's first step (it pays for the prefill's
tail) or the ``unsettled`` count it was given grew during it (the CPU head still choosing a kernel for a size).
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
        # the kept acceptance is a hint: until this process has checked it, the first call probes at its 2nd plain step
        self.interval = TUNING.probe_after if costs.pool_unchecked else probe_interval(costs)
        # plain steps in a row, from the call's first plain step (None before it): the call's second plain step probes,
        # later where the pair's acceptance is low, and where the pair cannot pay the run goes on from where the last
        # call (or process) left it
        self.plain_run: int | None = None
        self.proposing = False  # whether the last step that could propose did: it goes on without the margin
        # this plain run was found written off: it steps plain to retry_after without pricing, unless the costs it was
        # found on are replaced (a kept fit that disagreed with a measured step)
        self.hopeless, self.hopeless_on = False, 0

    def choose(self, reach: Sequence[int], forwards_per_position: int) -> int:
        """The width W ≤ max(reach) with the most expected emitted tokens per second (the smallest on a tie); a
        probe after a run of plain steps, and a plain step where the fit holds too few to price one (see the
        module's docstring)."""
        width = self._choice(reach, forwards_per_position)
        if max(reach, default=0):  # a step with nothing to propose (no lookup matched) is no choice to stop
            self.proposing = width > 0
        return width

    def _choice(self, reach: Sequence[int], forwards_per_position: int) -> int:
        if (self.hopeless and self.hopeless_on == self.costs.replacements and self.plain_run is not None
                and self.plain_run + 1 < TUNING.retry_after):
            self.plain_run += 1  # written off: no width pays at any acceptance the pair may have (nothing to price)
            self.costs.idle = self.plain_run
            return 0
        rows = range(len(reach))
        margin = 0.0 if self.proposing else TUNING.gain_margin
        rates = [self.acceptance.rate(i) for i in rows]
        best, gain = self._best(rates, reach, forwards_per_position, margin)
        if best or not max(reach, default=0):
            self.plain_run = self.costs.idle = 0
            self.hopeless = False
            if best and not self._plain_priced(len(reach), gain):
                return 0
            return best
        if self.plain_run is None or not self.hopeless or self.hopeless_on != self.costs.replacements:
            self.hopeless = self.written_off(len(reach), forwards_per_position, max(rates, default=0.0))
            self.hopeless_on = self.costs.replacements
        if self.plain_run is None:
            self.plain_run = self.costs.idle if self.hopeless else TUNING.probe_after - 2
        self.plain_run += 1
        self.costs.idle = self.plain_run
        if self.plain_run < self.interval or (self.hopeless and self.plain_run < TUNING.retry_after):
            return 0
        self.plain_run, self.interval, self.costs.idle, self.hopeless = 0, probe_interval(self.costs), 0, False
        return 1

    def written_off(self, rows: int, forwards_per_position: int, rate: float = 0.0) -> bool:
        """Whether no width can beat a plain step of ``rows`` rows even with every row accepting at the pair's pooled
        acceptance plus ``TUNING.optimism_sd`` standard deviations (with nothing measured, at up to 1), or at ``rate``
        (the best row's) where higher. While the acceptance an earlier process kept is unchecked, at 1: a kept
        acceptance of 0 must not stop the probe that checks it, but where no acceptance could pay (a draft whose
        forward costs a target step) there is nothing for a probe to find."""
        a, r = self.costs.pooled
        mean = (a + 1.0) / (a + r + 2.0)
        alpha = min(1.0, mean + TUNING.optimism_sd * (mean * (1.0 - mean) / (a + r + 3.0)) ** 0.5)
        if self.costs.pool_unchecked:
            alpha = 1.0
        best, _ = self._best([max(alpha, rate)] * rows, [self.k_max] * rows, forwards_per_position, margin=0.0)
        return best == 0

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
        if self.costs.observe_acceptance(judged, kept):  # the kept acceptance disagreed: the rows' prior with it
            self.acceptance.prior = self.costs.acceptance_prior()

    def keep_rows(self, live: Sequence[int]) -> None:
        self.acceptance.keep_rows(live)

    def finish(self) -> None:
        """The call is over: keep what it measured for later processes."""
        self.costs.save()

    @property
    def kept_state(self) -> str:
        """What became of the step costs an earlier process kept (:data:`.costs.KEPT_STATES`)."""
        return self.costs.kept


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

    kept_state = None  # a fixed k keeps nothing
