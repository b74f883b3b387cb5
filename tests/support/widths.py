"""A proposal-length controller that picks every step's width at random (seeded): a third of the steps propose
nothing, the others 1 to what the rows can reach. The engine must stay lossless whatever its controller picks,
including the draft catching up after plain steps; tests swap it in with the ``varying_widths`` fixture."""

from __future__ import annotations

import random

import pytest


class ScriptedWidths:
    def __init__(self, seed: int, chosen: list[int]):
        self.random = random.Random(seed)
        self.chosen = chosen

    def choose(self, reach, forwards_per_position: int) -> int:
        most = max(reach, default=0)
        width = 0 if most == 0 or self.random.random() < 1 / 3 else self.random.randint(1, most)
        self.chosen.append(width)
        return width

    def observe_step(self, draft: int, slots: int, seconds: float, live: int) -> None:
        pass

    def observe_row(self, row: int, judged: int, kept: int) -> None:
        pass

    def keep_rows(self, live) -> None:
        pass

    def finish(self) -> None:
        pass


@pytest.fixture
def varying_widths(monkeypatch):
    """Every generate call in the test gets a :class:`ScriptedWidths` (seeded by its call number); the fixture's
    value is the list of the widths chosen, in order."""
    chosen: list[int] = []
    calls = iter(range(1_000_000))
    monkeypatch.setattr("vocabcheck.decode.engine.controller_for",
                        lambda *args, **kwargs: ScriptedWidths(next(calls), chosen))
    return chosen
