"""``python -m vocabcheck``: the command line. A signal is caught from this module's first instruction on: until the
command line's handlers are in (:mod:`vocabcheck.interrupts`, installed before typer and rich are imported) it is only
recorded, and then reported like any other, so that a Ctrl-C at start-up is exit code 130 and one line, never a
traceback."""

import signal
import sys

_EARLY: list[int] = []  # signals that arrived before the command line's handlers were in


def _record(signum, frame) -> None:
    _EARLY.append(signum)


def _catch_early() -> None:
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(signum, _record)  # a signal the process ignores (nohup) stays ignored


def console_main() -> None:
    _catch_early()
    from .interrupts import EXIT_CODES, Terminated, handled, report, signal_of

    with handled():
        try:
            if _EARLY:
                raise KeyboardInterrupt  # reported below, with the signal that came first
            from .cli.app import main  # a signal meanwhile is held until this import is complete, then raised here

            code = main()
        except (KeyboardInterrupt, Terminated) as exc:
            code = report(_EARLY[0] if _EARLY else signal_of(exc))
    if _EARLY and code not in EXIT_CODES:  # arrived after the command's handlers were gone
        code = report(_EARLY[0])
    sys.exit(code)


if __name__ == "__main__":
    console_main()
