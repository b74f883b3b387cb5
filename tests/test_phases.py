"""Progress in a log: one line per phase and a heartbeat while a phase lasts, on stderr only."""

from __future__ import annotations

import io
import threading

import pytest

from rich.console import Console

from vocabcheck.render.phases import phases


def test_off_a_terminal_each_phase_is_a_line_and_a_long_one_has_a_heartbeat():
    log = io.StringIO()
    console = Console(file=log, force_terminal=False)
    beat = threading.Event()
    with phases(console, "training the pair", heartbeat_s=0.01) as say:
        while "still training the pair" not in log.getvalue():  # wait for the heartbeat line itself
            beat.wait(0.01)
        say("writing the target")
        say("writing the target")  # the same phase again is not a new line
    lines = log.getvalue().splitlines()
    assert lines[0] == "vocabcheck: training the pair"
    assert any(line.startswith("vocabcheck: still training the pair (") and line.endswith(" s)") for line in lines)
    assert lines.count("vocabcheck: writing the target") == 1


def test_a_heartbeat_only_follows_a_whole_interval_of_silence():
    """A phase that reports its own steps (training: step 10/100) is not interrupted by "still … (0 s)": every
    heartbeat line comes a whole interval after the last line, so its seconds are at least the interval."""
    log = io.StringIO()
    tick = threading.Event()
    with phases(Console(file=log, force_terminal=False), "training: step 0", heartbeat_s=1.0) as say:
        for step in range(1, 151):  # a new line every 10 ms for about 1.5 s: more than one interval in all
            tick.wait(0.01)
            say(f"training: step {step}")
    stills = [line for line in log.getvalue().splitlines() if line.startswith("vocabcheck: still")]
    assert all(int(line.rsplit("(", 1)[1].split()[0]) >= 1 for line in stills), stills


def test_on_a_terminal_no_log_lines_are_written():
    log = io.StringIO()
    console = Console(file=log, force_terminal=True)
    with phases(console, "benchmarking") as say:
        say("repeat 1/2")
    assert "vocabcheck:" not in log.getvalue()


def test_a_first_phase_not_announced_is_said_only_by_the_heartbeat():
    quick = io.StringIO()
    with phases(Console(file=quick, force_terminal=False), "loading the models", announce=False):
        pass  # ended at once (an error about the input, say): no line to go before that error's
    assert quick.getvalue() == ""
    log = io.StringIO()
    beat = threading.Event()
    with phases(Console(file=log, force_terminal=False), "loading the models", heartbeat_s=0.01,
                announce=False) as say:
        while "still loading the models" not in log.getvalue():
            beat.wait(0.01)
        say("predicting: 1 of 2 passes done")
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("vocabcheck: still loading the models (") and "vocabcheck: loading the models" not in lines
    said = lines.index("vocabcheck: predicting: 1 of 2 passes done")  # then only its own heartbeat, if any
    assert all(line.startswith("vocabcheck: still predicting: 1 of 2 passes done (") for line in lines[said + 1:])


def test_loading_off_a_terminal_is_silent_when_quick_and_beats_on_stderr_when_slow(monkeypatch):
    """`run`, `bench` and the demo load their models under a progress line: nothing in a log if it ends at once
    (a one-line error about the input stays one line), a heartbeat on stderr while it lasts."""
    from vocabcheck.render.terminal import progress_line

    quick = io.StringIO()
    with progress_line(Console(file=quick, force_terminal=False, stderr=True), "loading the models"):
        pass
    assert quick.getvalue() == ""
    monkeypatch.setenv("VOCABCHECK_HEARTBEAT_S", "0.01")  # the suite's own setting is a day
    log, stdout = io.StringIO(), io.StringIO()
    beat = threading.Event()
    monkeypatch.setattr("sys.stderr", log)
    with progress_line(Console(file=stdout, force_terminal=False), "loading the target and the draft"):
        while "still loading the target and the draft (" not in log.getvalue():  # on stderr, not the story's stdout
            beat.wait(0.01)
    assert stdout.getvalue() == ""


@pytest.mark.parametrize("value, seconds", [("2.5", 2.5), ("", 10.0), ("0", 10.0), ("-3", 10.0), ("nan", 10.0),
                                            ("inf", 10.0), ("soon", 10.0)])
def test_the_heartbeat_interval_is_a_positive_number_of_seconds_or_the_default(monkeypatch, value, seconds):
    from vocabcheck.render.phases import heartbeat_seconds

    monkeypatch.setenv("VOCABCHECK_HEARTBEAT_S", value)
    assert heartbeat_seconds() == seconds
