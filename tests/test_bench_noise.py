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
