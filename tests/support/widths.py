"""A proposal-length controller that picks every step's width at random (seeded): a third of the steps propose
nothing, the others 1 to what the rows can reach. The engine must stay lossless whatever its controller picks,
including the draft catching up after plain steps; tests swap it in with the ``varying_widths`` fixture. It also keeps
what each proposing step told it of its draft's catch-up, beside the plain steps it chose since it last proposed."""

from __future__ import annotations

import random

import pytest


class Chosen(list):
    """The widths chosen, in order; ``catch_ups``: per proposing step observed, (plain steps chosen since the
    controller last proposed, the catch-up the engine reported, whether it was the call's first proposing step)."""

    def __init__(self):
        super().__init__()
        self.catch_ups: list[tuple[int, int, bool]] = []


class ScriptedWidths:
    def __init__(self, seed: int, chosen: Chosen):
        self.random = random.Random(seed)
        self.chosen = chosen
        self.plain_since = 0  # plain steps chosen since the last proposing one
        self.since_then = 0  # ... as it was when the step being observed was chosen
        self.proposed = False  # whether a step of this call has proposed yet

    def choose(self, reach, forwards_per_position: int) -> int:
        most = max(reach, default=0)
        width = 0 if most == 0 or self.random.random() < 1 / 3 else self.random.randint(1, most)
        self.chosen.append(width)
        self.since_then = self.plain_since
        self.plain_since = 0 if width else self.plain_since + 1
        return width

    def observe_step(self, draft: int, slots: int, seconds: float, live: int, catch_up: int = 0) -> None:
        if slots > live:
            self.chosen.catch_ups.append((self.since_then, catch_up, not self.proposed))
            self.proposed = True

    def observe_row(self, row: int, judged: int, kept: int) -> None:
        pass

    def keep_rows(self, live) -> None:
        pass

    def finish(self) -> None:
        pass

    kept_state = None


@pytest.fixture
def varying_widths(monkeypatch):
    """Every generate call in the test gets a :class:`ScriptedWidths` (seeded by its call number); the fixture's
    value is the list of the widths chosen, in order."""
    chosen = Chosen()
    calls = iter(range(1_000_000))
    monkeypatch.setattr("vocabcheck.decode.engine.controller_for",
                        lambda *args, **kwargs: ScriptedWidths(next(calls), chosen))
    return chosen
