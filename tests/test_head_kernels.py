"""The CPU head's kernel choices are kept on disk per machine and head shape, so that a cold process does not time
again what an earlier one timed (each timing costs several products, more than the step it serves)."""

from __future__ import annotations

import json

import pytest
import torch

from vocabcheck.decode import head as head_module
from vocabcheck.decode.head import KernelFile, TunedHead


COSTS = {"onednn": 1.0, "mkl": 2.0, "mkl-columns": 3.0}  # made-up seconds per product: oneDNN wins clearly


@pytest.fixture()
def fresh(monkeypatch, tmp_path):
    """A process that has timed nothing yet, with its own cache directory; every kernel call is counted and takes
    COSTS[kernel] on a made-up clock (the choice must not depend on this machine's load)."""
    monkeypatch.setenv("VOCABCHECK_CACHE", str(tmp_path))
    monkeypatch.setattr(head_module, "_CHOICES", {})
    calls = []
    clock = [0.0]

    def counting(name, kernel):
        def run(hidden, weight):
            calls.append(name)
            clock[0] += COSTS[name]
            return kernel(hidden, weight)
        return run

    real = head_module.candidates
    monkeypatch.setattr(head_module, "candidates", lambda: {n: counting(n, k) for n, k in real().items()})
    monkeypatch.setattr(head_module.time, "perf_counter", lambda: clock[0])
    return calls


def weight() -> torch.Tensor:
    return torch.randn(301, 24, generator=torch.Generator().manual_seed(0))


def hidden(rows: int) -> torch.Tensor:
    return torch.randn(rows, 1, 24, generator=torch.Generator().manual_seed(rows))


def test_a_new_process_uses_the_choices_an_earlier_one_timed(fresh, monkeypatch):
    first = TunedHead(weight())
    with torch.inference_mode():
        for rows in (1, 16, 48):
            first(hidden(rows))
    timed = len(fresh)
    assert timed >= 3 * len(head_module.candidates())  # each new size timed every candidate
    stored = json.loads(KernelFile.path().read_text())
    assert stored["version"] == 1
    (heads,) = stored["machines"].values()
    assert set(heads["301x24 float32"]) == {"1", "16", "64"}

    monkeypatch.setattr(head_module, "_CHOICES", {})  # a new process: nothing timed in memory
    fresh.clear()
    second = TunedHead(weight())
    with torch.inference_mode():
        out = second(hidden(16))
        second(hidden(40))  # bucket 64, timed by the first process at 48 rows
        second(hidden(1))
    assert len(fresh) == 3  # one product each, no timing
    assert second.choice == first.choice
    assert torch.allclose(out, torch.nn.functional.linear(hidden(16), weight()), atol=1e-5)


@pytest.mark.parametrize("content", ["{not json", json.dumps([1, 2]), json.dumps({"version": 99, "machines": {}}),
                                     None])
def test_an_unreadable_or_foreign_file_only_costs_the_timing(fresh, content):
    path = KernelFile.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if content is None:  # this machine's entry names a kernel that is not a candidate here, and a bad bucket
        path.write_text(json.dumps({"version": 1, "machines": {KernelFile.machine(): {
            "301x24 float32": {"16": "no-such-kernel", "x": "onednn", "2": 7}}}}))
    else:
        path.write_text(content)
    head = TunedHead(weight())
    with torch.inference_mode():
        out = head(hidden(16))
    assert len(fresh) >= len(head_module.candidates())  # timed again
    assert head.choice[16] in head_module.candidates()
    assert torch.allclose(out, torch.nn.functional.linear(hidden(16), weight()), atol=1e-5)
    heads = json.loads(path.read_text())["machines"][KernelFile.machine()]
    assert heads["301x24 float32"]["16"] == head.choice[16]  # rewritten as a valid file


def test_a_cache_directory_that_cannot_be_written_is_not_an_error(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("VOCABCHECK_CACHE", str(blocker / "below-a-file"))
    head = TunedHead(weight())
    with torch.inference_mode():
        out = head(hidden(3))
    assert torch.allclose(out, torch.nn.functional.linear(hidden(3), weight()), atol=1e-5)
    assert not (blocker / "below-a-file").exists()


def test_choices_are_kept_per_machine(fresh, monkeypatch):
    with torch.inference_mode():
        TunedHead(weight())(hidden(1))
    monkeypatch.setattr(head_module, "_CHOICES", {})
    monkeypatch.setattr(KernelFile, "machine", staticmethod(lambda: "another CPU; torch 0; 64 threads"))
    fresh.clear()
    with torch.inference_mode():
        TunedHead(weight())(hidden(1))
    assert len(fresh) >= len(head_module.candidates())  # another machine times for itself
    assert len(json.loads(KernelFile.path().read_text())["machines"]) == 2


def test_a_close_race_is_not_kept_for_later_processes(fresh, monkeypatch):
    """Where the runner-up is within 20 % of the winner, a busy moment could have picked either: the choice serves
    this process only, and the next process times that size again."""
    monkeypatch.setitem(COSTS, "mkl", 1.1)
    head = TunedHead(weight())
    with torch.inference_mode():
        head(hidden(16))
    assert head.choice[16] == "onednn"
    assert not KernelFile.path().exists()
    monkeypatch.setattr(head_module, "_CHOICES", {})
    fresh.clear()
    with torch.inference_mode():
        TunedHead(weight())(hidden(16))
    assert len(fresh) > 1  # timed again
