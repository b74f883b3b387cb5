"""``-k auto``'s tuning: every constant the controller and its cost model use, in one frozen object.

:data:`TUNING` is what the decoder runs with. The figures behind each value (the replays and benches that chose
them) are in docs/decoder.md and reports/replay/; this module only says what each value does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # acceptance (controller.Acceptance): a row's Beta posterior, its counts decaying per step
    prior_accepted: float = 1.0  # a row's acceptance prior, Beta(1, 1), and the weight of the pooled one
    prior_rejected: float = 1.0
    memory: float = 0.9  # acceptance counts kept per step a row is verified with proposals
    idle: float = 0.99  # ... and per step it proposes nothing
    pool_memory: float = 0.99  # kept per row verification by the pooled acceptance a new call's rows start from

    # the choice (controller.AdaptiveLength)
    gain_margin: float = 0.03  # a width must promise this much more than a plain step to start proposing
    plain_sure: float = 1.5  # a width promising this many times a plain step's rate needs no fresh plain step
    probe_after: int = 16  # plain steps in a row after which one step proposes one token per row
    probe_max: int = 128  # ... at most, where the pair's pooled acceptance is low
    retry_after: int = 2048  # plain steps in a row before a pair that cannot pay (written off) is probed again

    # the cost fit (costs.StepCosts): least squares per number of live rows, held to a prior by a ridge
    cost_memory: float = 0.95  # weight kept per step by the older step times
    prior_weight: float = 0.02  # the ridge's weight on the prior's coefficients (a measured step weighs 1)
    plain_weight: float = 0.25  # ... on the plain step's own term (prior 0)
    slot_share: float = 0.15  # prior: one more verified slot per row costs this share of a plain step
    catch_up_share: float = 0.25  # prior: a position a draft catches up on costs this share of a draft forward
    catch_up_scale: int = 16  # the catch-up of a typical probe (the ridge's scale for its coefficient)
    catch_up_fit_max: int = 64  # a step whose draft caught up on more positions is no sample for the fit
    plain_min: float = 0.3  # a step is plain while the fit holds fewer (decayed) plain steps of its size of batch
    donor_plain: float = 0.1  # (decayed) plain steps a fit needs to price other sizes of batch
    donor_proposing: float = 1.0  # ... and proposing steps
    first_weight: float = 0.5  # the weight of a proposing shape's first step in a process (a plain one's: none)

    # kept state (costs.STORE) is a hint: what no machine could have measured is measured again
    kept_unit_s: tuple[float, float] = (1e-6, 600.0)  # a plain step between a microsecond and ten minutes
    kept_bound: float = 1e12  # sums no larger than a million steps of that could make
    kept_disagree: float = 3.0  # a kept fit whose price of the first measured step is off by this factor is replaced
    kept_llr: float = 3.0  # ... and kept acceptance this process's verifications make e^3 = 20 times less likely
    kept_check_rows: int = 64  # row verifications of a process that check the kept acceptance

    # a pair that cannot pay (controller.AdaptiveLength.written_off): no width beats a plain step even at this many
    optimism_sd: float = 2.0  # standard deviations above the pair's pooled acceptance


TUNING = Tuning()
