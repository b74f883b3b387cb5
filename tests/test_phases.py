"""Progress in a log: one line per phase and a heartbeat while a phase lasts, on stderr only."""

from __future__ import annotations

import io
import threading

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


def test_on_a_terminal_no_log_lines_are_written():
    log = io.StringIO()
    console = Console(file=log, force_terminal=True)
    with phases(console, "benchmarking") as say:
        say("repeat 1/2")
    assert "vocabcheck:" not in log.getvalue()
