"""Figures that cannot be right are flagged, in the table, the JSON and the report, and not quoted as results."""

from __future__ import annotations


from vocabcheck.bench.plan import Row
from vocabcheck.bench.run import _noise


def row(spread=(10.0, 11.0), efficiency=0.8, method="ngram"):
    return Row(method=method, batch_size=16, tpot_ms=10.5, tpot_spread_ms=spread, tokens_per_s=95.0,
               acceptance_rate=0.1, mean_accepted_length=1.03, acceptance_by_position=(0.1,), speedup=3.12,
               efficiency=efficiency, k=4, prompts=16)


def test_a_steady_cell_below_its_ideal_is_a_result():
    assert _noise(row(), repeats=3).noise == ""


def test_an_efficiency_above_the_ideal_is_noise_even_with_one_repeat():
    """bench --repeat 1 on a busy machine printed efficiencies of 2.10 and 3.06 and a 3.12x n-gram speedup at 0.03
    proposals per step."""
    flagged = _noise(row(efficiency=3.06), repeats=1)
    assert "3.06x the ideal" in flagged.noise


def test_a_spread_over_a_quarter_across_repeats_is_noise_and_one_repeat_has_no_spread():
    assert "TPOT varied 1.50x across repeats" in _noise(row(spread=(10.0, 15.0)), repeats=3).noise
    assert _noise(row(spread=(10.0, 10.0)), repeats=1).noise == ""


def test_a_noisy_cell_is_not_quoted_as_a_result_in_the_summary():
    from vocabcheck.render import bench_report

    noisy = _noise(row(efficiency=2.1), repeats=1)

    class Result:
        rows, hf_rows = (noisy,), ()

        def row(self, method, batch, k=None):
            return noisy

    assert bench_report._summary_cell(Result(), "ngram", 4, 16) == "10.50 ms (noisy)"
    assert bench_report._noise_lines(Result()) == [f"{bench_report.label('ngram', 4)}, batch 16: {noisy.noise}"]
    assert bench_report.row_document(noisy)["noise"] == noisy.noise


def test_other_processes_busy_during_a_repeat_flag_the_cell_even_with_one_repeat():
    """One repeat has no spread: what tells it was disturbed is the machine itself (other processes' CPU time)."""
    assert "other processes used 50% of the CPUs" in _noise(row(), repeats=1, others=0.5).noise
    assert _noise(row(), repeats=1, others=0.05).noise == ""


def test_other_processes_share_counts_what_they_used_and_not_what_we_did():
    from vocabcheck.machine import CpuSample

    before = CpuSample(at=0.0, busy=100.0, own=10.0)
    cores = __import__("os").cpu_count()
    # 2 s of wall: we used 2 CPU seconds, others 1 CPU second more than that
    after = CpuSample(at=2.0, busy=103.0, own=12.0)
    assert after.others_share(before) == 1.0 / (2.0 * cores)
    assert CpuSample(at=2.0, busy=101.0, own=12.0).others_share(before) == 0.0  # never below nothing
    assert CpuSample(at=2.0, busy=None, own=12.0).others_share(before) is None  # no /proc/stat: unknown


def test_a_busy_loop_beside_us_is_seen_as_another_process(tmp_path):
    """A real process spinning for a while: its CPU time shows as others' share (it ran, we waited)."""
    import subprocess
    import sys

    from vocabcheck.machine import CpuSample

    before = CpuSample.now()
    if before.busy is None:
        import pytest

        pytest.skip("this system has no /proc/stat to read the machine's CPU time from")
    # the child spins for 1.5 CPU seconds of its own (not wall time: a busy machine only makes it take longer)
    subprocess.run([sys.executable, "-c", "import time\nwhile time.process_time() < 1.5: pass"], check=True)
    after = CpuSample.now()
    wall = after.at - before.at
    assert after.others_share(before) * wall * __import__("os").cpu_count() >= 1.2
