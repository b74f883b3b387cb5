"""The CPU head picks its kernel per size of row count by timing the calls that serve that size (a size met once
costs one product, not a timing), and keeps the choices on disk per machine and head shape, so that a cold process
does not time again what an earlier one timed."""

from __future__ import annotations

import json

import pytest
import torch

from vocabcheck.decode.cpu import head as head_module
from vocabcheck.decode.cpu.head import KernelFile, TunedHead


COSTS = {"onednn": 1.0, "mkl": 2.0, "mkl-columns": 3.0}  # made-up seconds per product: oneDNN wins clearly


@pytest.fixture()
def fresh(monkeypatch, tmp_path):
    """A process that has timed nothing yet, with its own cache directory and the three candidates (each the
    model's own product underneath, so the test does not depend on this torch having oneDNN); every kernel call is
    counted and takes COSTS[kernel] on a made-up clock (the choice must not depend on this machine's load)."""
    monkeypatch.setenv("VOCABCHECK_CACHE", str(tmp_path))
    monkeypatch.setattr(head_module, "_CHOICES", {})
    calls = []
    clock = [0.0]

    def counting(name):
        def run(hidden, weight):
            calls.append(name)
            clock[0] += COSTS[name]
            return torch.nn.functional.linear(hidden, weight)
        return run

    monkeypatch.setattr(head_module, "candidates", lambda: {n: counting(n) for n in ("mkl", "mkl-columns", "onednn")})
    monkeypatch.setattr(head_module.time, "perf_counter", lambda: clock[0])
    return calls


LEAD = head_module.RACE_AFTER - 1  # a size's first calls, untimed through the likeliest winner
RACE = LEAD + 5  # calls that take a size through its race: three candidates once, then the two left once more


def served(head: TunedHead, rows: int, times: int) -> None:
    """``times`` calls at ``rows`` rows, each checked against the model's own product."""
    with torch.inference_mode():
        for _ in range(times):
            assert torch.allclose(head(hidden(rows)), torch.nn.functional.linear(hidden(rows), weight()), atol=1e-5)


def weight() -> torch.Tensor:
    return torch.randn(301, 24, generator=torch.Generator().manual_seed(0))


def hidden(rows: int) -> torch.Tensor:
    return torch.randn(rows, 1, 24, generator=torch.Generator().manual_seed(rows))


def test_a_size_met_once_costs_one_product(fresh):
    """A probe's verification width or a batch's last rows meet a size once: that call is one product through the
    likeliest winner, not a timing of every candidate."""
    head = TunedHead(weight())
    served(head, 4, 1)
    assert fresh == ["onednn"]
    assert 4 not in head.choice and not KernelFile.path().exists()  # not decided on one product


def test_a_size_met_rarely_never_runs_a_slower_candidate(fresh):
    """An occasional plain step among proposing ones meets its size now and then: were those calls the race, each
    would run a slower kernel in turn, and the controller would price plain steps from them."""
    head = TunedHead(weight())
    served(head, 4, LEAD)
    assert fresh == ["onednn"] * LEAD and 4 not in head.choice


def test_a_size_met_often_is_timed_on_its_own_calls_then_served_by_the_fastest(fresh):
    head = TunedHead(weight())
    served(head, 4, RACE + 4)
    assert len(fresh) == RACE + 4  # every timing was a call's own product: no extra ones
    # each candidate once; mkl-columns (3 s) is over twice the fastest (1 s) and leaves the race; then a second round
    assert fresh[LEAD:RACE] == ["onednn", "mkl-columns", "mkl", "onednn", "mkl"]
    assert fresh[:LEAD] + fresh[RACE:] == ["onednn"] * (LEAD + 4) and head.choice[4] == "onednn"


def test_a_large_size_is_never_timed(fresh, monkeypatch):
    """Above ``RACE_ROWS`` rows oneDNN serves every call (the fastest at 16 to 80 rows for every head measured), and
    no slower candidate runs: a race there cost a fresh batch-16 call 50–115 ms. Without oneDNN, MKL's own."""
    monkeypatch.setitem(COSTS, "mkl", 0.1)  # would win a timing
    head = TunedHead(weight())
    served(head, head_module.RACE_ROWS + 1, RACE)
    served(head, 80, RACE)
    assert fresh == ["onednn"] * 2 * RACE and not head.choice and not KernelFile.path().exists()
    kernels = {n: k for n, k in head_module.candidates().items() if n != "onednn"}
    monkeypatch.setattr(head_module, "candidates", lambda: kernels)
    monkeypatch.setattr(head_module, "_CHOICES", {})
    fresh.clear()
    served(TunedHead(weight()), 16, 2)
    assert fresh == ["mkl", "mkl"]


def test_other_row_counts_of_a_bucket_get_the_fastest_so_far_untimed(fresh, monkeypatch):
    """Bucket 8 holds 5 to 8 rows; times at different row counts do not compare, so the race runs at the row
    count it started at, and the bucket's other row counts run the fastest so far without advancing it."""
    monkeypatch.setitem(COSTS, "mkl", 0.5)  # mkl wins this time
    head = TunedHead(weight())
    served(head, 8, LEAD + 3)  # the race's first round: onednn, mkl-columns, mkl
    served(head, 6, 2)
    assert fresh[LEAD:] == ["onednn", "mkl-columns", "mkl", "mkl", "mkl"]
    served(head, 8, 2)  # the race's second round: onednn and mkl again (mkl-columns left it)
    assert fresh[LEAD + 5:] == ["onednn", "mkl"] and head.choice[8] == "mkl"


def test_a_new_process_uses_the_choices_an_earlier_one_timed(fresh, monkeypatch):
    first = TunedHead(weight())
    for rows in (1, 4, 7):
        served(first, rows, RACE)
    stored = json.loads(KernelFile.path().read_text())
    assert stored["version"] == 1
    (heads,) = stored["machines"].values()
    assert heads["301x24 float32"] == {"1": "onednn", "4": "onednn", "8": "onednn"}

    monkeypatch.setattr(head_module, "_CHOICES", {})  # a new process: nothing timed in memory
    fresh.clear()
    second = TunedHead(weight())
    monkeypatch.setitem(COSTS, "mkl", 0.1)  # would win a new timing: the kept choice is used without one
    served(second, 4, RACE)
    served(second, 6, RACE)  # bucket 8, timed by the first process at 7 rows
    served(second, 1, RACE)
    assert fresh == ["onednn"] * 3 * RACE
    assert second.choice == first.choice


@pytest.mark.parametrize("content", ["{not json", json.dumps([1, 2]), json.dumps({"version": 99, "machines": {}}),
                                     None])
def test_an_unreadable_or_foreign_file_only_costs_the_timing(fresh, content):
    path = KernelFile.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if content is None:  # this machine's entry names a kernel that is not a candidate here, and a bad bucket
        path.write_text(json.dumps({"version": 1, "machines": {KernelFile.machine(): {
            "301x24 float32": {"4": "no-such-kernel", "x": "onednn", "2": 7}}}}))
    else:
        path.write_text(content)
    head = TunedHead(weight())
    served(head, 4, RACE)
    assert set(fresh) == set(COSTS)  # timed again
    assert head.choice[4] == "onednn"
    heads = json.loads(path.read_text())["machines"][KernelFile.machine()]
    assert heads["301x24 float32"] == {"4": "onednn"}  # rewritten as a valid file


def test_a_cache_directory_that_cannot_be_written_is_not_an_error(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("VOCABCHECK_CACHE", str(blocker / "below-a-file"))
    head = TunedHead(weight())
    served(head, 3, RACE)
    assert head.choice[4] == "onednn"
    assert not (blocker / "below-a-file").exists()


def test_choices_are_kept_per_machine(fresh, monkeypatch):
    served(TunedHead(weight()), 1, RACE)
    monkeypatch.setattr(head_module, "_CHOICES", {})
    monkeypatch.setattr(KernelFile, "machine", staticmethod(lambda: "another CPU; torch 0; 64 threads"))
    fresh.clear()
    served(TunedHead(weight()), 1, RACE)
    assert set(fresh) == set(COSTS)  # another machine times for itself
    assert len(json.loads(KernelFile.path().read_text())["machines"]) == 2


def test_a_close_race_is_not_kept_for_later_processes(fresh, monkeypatch):
    """Where the runner-up is within 20 % of the winner, a busy moment could have picked either: the choice serves
    this process only, and the next process times that size again."""
    monkeypatch.setitem(COSTS, "mkl", 1.1)
    head = TunedHead(weight())
    served(head, 4, RACE)
    assert head.choice[4] == "onednn"
    assert not KernelFile.path().exists()
    monkeypatch.setattr(head_module, "_CHOICES", {})
    fresh.clear()
    served(TunedHead(weight()), 4, RACE)
    assert set(fresh) == set(COSTS)  # timed again


def test_a_size_is_unsettled_until_chosen_or_its_first_calls_have_passed(fresh):
    """Steps through a size whose kernel is not chosen yet are not what the controller learns step costs from
    (:attr:`TunedHead.unsettled`): every call of a size until its race decides, and no more than
    ``UNSETTLED_CALLS`` of them where the race stalls (its row count not met again), so that a stalled size does not
    keep the controller from ever learning what its steps cost."""
    head = TunedHead(weight())
    before = TunedHead.unsettled
    served(head, 4, RACE)  # through the race
    assert head.choice[4] == "onednn" and TunedHead.unsettled - before == RACE
    served(head, 4, 3)  # chosen: settled
    assert TunedHead.unsettled - before == RACE
    served(head, 8, LEAD + 1)  # bucket 8's race starts at 8 rows, which never come again
    served(head, 6, 2 * head_module.UNSETTLED_CALLS)
    assert 8 not in head.choice
    assert TunedHead.unsettled - before == RACE + head_module.UNSETTLED_CALLS
