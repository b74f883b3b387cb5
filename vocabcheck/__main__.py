"""``python -m vocabcheck``: the command line. The signal handlers go in before the command line's modules are imported
(typer, rich), so that a Ctrl-C that early ends the command like any other, without a traceback."""

import sys

from .interrupts import Terminated, handled, report, signal_of


def console_main() -> None:
    with handled():
        try:
            from .cli.app import main  # a signal meanwhile is held until this import is complete, then raised here

            code = main()
        except (KeyboardInterrupt, Terminated) as exc:
            code = report(signal_of(exc))
    sys.exit(code)


if __name__ == "__main__":
    console_main()
