"""Kept state is a hint, never an authority: ``-k auto`` started from a poisoned ``step-costs.json`` entry (zero,
huge or tiny costs, an acceptance inverted either way, sums no solve can use) comes back to what the clean kept
state earns within a bounded number of steps (docs/decoder.md, "Kept state").

The steps are simulated — a made-up step time t(W) = 10 ms + 1 ms·W + 0.5 ms·rows·W and a deterministic
acceptance of 0.8 — so the comparison is exact and never depends on this machine's load. What a run of each
variant earns is measured by the tokens the clean acceptance promises per second of the made-up step time.
"""

from __future__ import annotations

import copy
import json

import pytest

from vocabcheck.decode.auto.controller import AdaptiveLength
from vocabcheck.decode.auto.costs import StepCosts

K_MAX = 8
ALPHA = 0.8
WINDOW = 16  # steps per compared window
SETTLED = 32  # steps after which every window earns what the clean run earns, within TOLERANCE (docs/decoder.md)
TOLERANCE = 0.03
STEPS = 160


def step_seconds(width: int, rows: int) -> float:
    return 0.010 + 0.001 * width + 0.0005 * rows * width


def accepted(step: int, row: int, width: int) -> int:
    """Proposals accepted, deterministic, 8 in 10 on average given the ones before were accepted."""
    kept = 0
    while kept < width and (step * 7 + row * 13 + kept * 5) % 10 < ALPHA * 10:
        kept += 1
    return kept


def widths_chosen(costs: StepCosts, rows: int, steps: int, start: int = 0) -> list[int]:
    controller = AdaptiveLength(rows, K_MAX, costs)
    widths = []
    for step in range(start, start + steps):
        width = controller.choose([K_MAX] * rows, 1)
        widths.append(width)
        first = step == start  # a process's first step compiles and is not priced, as in the decoder
        controller.observe_step(width, rows * (width + 1), None if first else step_seconds(width, rows), rows)
        for row in range(rows):
            controller.observe_row(row, width, accepted(step, row, width))
    return widths


def earned(widths: list[int], rows: int) -> list[float]:
    """Tokens per second each step's width promises at the true acceptance."""
    return [rows * sum(ALPHA ** j for j in range(w + 1)) / step_seconds(w, rows) for w in widths]


def restored(state: dict, rows: int) -> StepCosts:
    costs = StepCosts(draft_share=0.1, rows=rows, k_max=K_MAX)
    costs.kept = "used" if costs.restore(json.loads(json.dumps(state))) else "discarded"
    return costs


@pytest.fixture(scope="module", params=[1, 4], ids=["batch-1", "batch-4"])
def clean(request):
    """What 200 steps of a clean process kept, and what a process starting from it chooses next."""
    rows = request.param
    costs = StepCosts(draft_share=0.1, rows=rows, k_max=K_MAX)
    widths_chosen(costs, rows, 200)
    state = costs.state()
    return rows, state, widths_chosen(restored(state, rows), rows, STEPS, start=1000)


def scaled(factor):
    def poison(state):
        for fit in state["fits"].values():
            fit["unit"] *= factor
            fit["xt"] = [v * factor for v in fit["xt"]]
    return poison


def zero(state):
    for fit in state["fits"].values():
        fit["unit"], fit["xt"] = 0.0, [0.0] * len(fit["xt"])


def singular(state):
    for fit in state["fits"].values():
        fit["xx"] = [[20.0] * len(row) for row in fit["xx"]]


POISONS = {
    "zero": (zero, "discarded"),  # a unit of 0: nothing a machine measured
    "huge": (scaled(1e3), "replaced"),  # well-formed, every cost 1000× what the steps take
    "tiny": (scaled(1e-3), "replaced"),
    "never-accepts": (lambda s: s.update(pooled=[0.0, 100.0]), "replaced"),  # a good draft kept as useless
    "always-accepts": (lambda s: s.update(pooled=[800.0, 0.0]), "replaced"),
    "unsolvable": (singular, "replaced"),  # sums no solve can use: every feature the same
}


@pytest.mark.parametrize("name", POISONS)
def test_a_poisoned_kept_state_earns_what_the_clean_one_does_within_a_bounded_number_of_steps(clean, name):
    rows, state, clean_widths = clean
    poison, becomes = POISONS[name]
    state = copy.deepcopy(state)
    poison(state)
    costs = restored(state, rows)
    widths = widths_chosen(costs, rows, STEPS, start=1000)
    assert costs.kept == becomes  # what run's output reports (metrics.kept_state)
    ours, theirs = earned(widths, rows), earned(clean_widths, rows)
    for start in range(SETTLED, STEPS, WINDOW):
        ratio = sum(ours[start:start + WINDOW]) / sum(theirs[start:start + WINDOW])
        assert ratio >= 1.0 - TOLERANCE, (name, start, widths, clean_widths)
    assert any(widths), name  # it proposes again: never a permanent plain choice


def test_a_discarded_kept_state_behaves_exactly_as_none_at_all(clean):
    rows, state, _ = clean
    state = copy.deepcopy(state)
    zero(state)
    fresh = widths_chosen(StepCosts(draft_share=0.1, rows=rows, k_max=K_MAX), rows, STEPS, start=1000)
    assert widths_chosen(restored(state, rows), rows, STEPS, start=1000) == fresh


def test_a_clean_kept_state_is_used_and_stays_used(clean):
    rows, state, _ = clean
    costs = restored(state, rows)
    widths_chosen(costs, rows, STEPS, start=1000)
    assert costs.kept == "used"
