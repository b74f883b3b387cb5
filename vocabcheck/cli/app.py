"""The Typer application: the one place where commands are registered and where errors become exit codes.

Each command lives in the module named after it (``cli/compare.py`` holds ``compare``...): it parses its options,
calls one library function and renders the result.

Exit codes: 0 success; 1 an incompatible pair (or a warning under --strict, or a gate expectation not met);
2 bad input or usage, as one line naming the file and the problem; 3 a bug in vocabcheck, as one line that says
where to report it; 130 interrupted (143 SIGTERM, 129 SIGHUP). ``--debug`` (or VOCABCHECK_DEBUG=1) adds the traceback.
"""

from __future__ import annotations

import io
import os
import sys
import traceback

import typer

from .. import interrupts
from ..errors import REPORT_BUGS, ExitCode, VocabcheckError, library_failure
from ..text import printable
from . import align, bench, compare, demo, gate, help, inspect, matrix, predict, run

try:  # typer >= 0.24 vendors click as typer._click; older typer uses click itself
    from typer._click.exceptions import BadParameter, ClickException
except ImportError:  # pragma: no cover
    from click.exceptions import BadParameter, ClickException

app = typer.Typer(
    name="vocabcheck",
    cls=help.Group,
    help="Check that a draft and a target model give every token id the same meaning, then run lossless "
         "speculative decoding across padded vocabularies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from ..versions import lines

        typer.echo("\n".join(lines()))
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version, and those of the libraries it runs on (for a bug report)."),
) -> None:
    """vocabcheck: compare tokenizers and embedding shapes, run and benchmark speculative decoding."""
    # --debug is read from the command line by main(), which prints tracebacks; nothing to keep here


# in the order `vocabcheck --help` lists them
app.command("demo", cls=help.Command)(demo.demo)
app.command("inspect", cls=help.Command)(inspect.inspect)
app.command("compare", cls=help.Command)(compare.compare)
app.command("run", cls=help.Command)(run.run)
app.command("gate", cls=help.Command)(gate.gate)
app.command("matrix", cls=help.Command)(matrix.matrix)
app.command("align", cls=help.Command)(align.align)
app.command("bench", cls=help.Command)(bench.bench)
app.command("predict", cls=help.Command)(predict.predict)


def _debug_first(argv: list[str]) -> list[str]:
    """``--debug`` is the application's option; it is accepted after the command too (``vocabcheck compare A B
    --debug``), moved in front of it here (not after ``--``, where every word is an argument)."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--debug" not in argv[1:end]:
        return argv
    return ["--debug"] + [a for a in argv[:end] if a != "--debug"] + argv[end:]


def _debug(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("VOCABCHECK_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it).

    SIGINT, SIGTERM and SIGHUP stop any command the same way: the stack unwinds (temporary files go) and the exit
    code is 130, 143 or 129; SIGTERM and SIGHUP also say so in one line (:mod:`vocabcheck.interrupts`). The handlers
    are there only while the command runs; the previous ones are back when this returns.
    """
    with interrupts.handled() as signals:
        try:
            code = _main(argv)
        except (KeyboardInterrupt, interrupts.Terminated) as exc:  # SIGTERM, SIGHUP, or Ctrl-C outside _main's try
            code = interrupts.report(interrupts.signal_of(exc))
        if signals.received is not None and code not in interrupts.EXIT_CODES:  # a library swallowed it: it counts
            code = interrupts.report(signals.received)
        return code


def _main(argv: list[str] | None) -> int:
    argv = _debug_first(list(sys.argv[1:] if argv is None else argv))
    _escape_undecodable_output()
    command = typer.main.get_command(app)
    from ..render.progress import show_progress

    # download progress is drawn on a terminal, never with machine-readable output (--json)
    progress = show_progress(False if "--json" in argv else None)
    try:
        with progress:
            result = command.main(args=argv, prog_name="vocabcheck", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BadParameter as exc:  # a value the option's type refuses (``-k four``): one line, like any bad input
        print(f"error: {printable(_bad_value(exc))}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except ClickException as exc:  # usage errors: click prints the usage line and the problem (which may quote argv)
        shown = io.StringIO()
        exc.show(file=shown)
        sys.stderr.write(printable(shown.getvalue(), keep="\n"))
        return ExitCode.BAD_INPUT
    except VocabcheckError as exc:
        if _debug(argv):
            traceback.print_exc()
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # the reader went away (``vocabcheck ... | head``): nothing left to say
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as exc:  # a bug: one line, a pointer, and the traceback on request
        return _bug(exc, argv)
    except BaseException as exc:  # a Rust panic in an extension: PyO3's PanicException derives from BaseException
        if not library_failure(exc):
            raise
        return _bug(exc, argv)


def _bad_value(exc: BadParameter) -> str:
    """``-k / --num-speculative-tokens takes a whole number, not 'four'``; typer (0.24 and later) converts values with
    pydantic, whose error carries the value given."""
    flags = " / ".join(exc.param.opts + exc.param.secondary_opts) if exc.param is not None else "an option"
    errors = getattr(exc.__cause__, "errors", None)
    first = errors()[0] if callable(errors) and errors() else {}
    wanted = {"int_parsing": "a whole number", "int_from_float": "a whole number", "float_parsing": "a number",
              "bool_parsing": "true or false"}.get(first.get("type"))
    if wanted and "input" in first:
        return f"{flags} takes {wanted}, not {first['input']!r}"
    return f"{flags}: {exc.message}"


def _escape_undecodable_output() -> None:
    """A path whose bytes are not UTF-8 reaches Python as a string with surrogates ('\\udcff'); a terminal stream with
    strict errors would fail to print it. The process's own stdout and stderr print such characters as escapes."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and stream in (sys.__stdout__, sys.__stderr__) \
                and getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def _bug(exc: BaseException, argv: list[str]) -> int:
    if _debug(argv):
        traceback.print_exc()
    detail = printable(" ".join(str(exc).split())[:300])
    print(f"internal error: {type(exc).__name__}: {detail} — this is a bug in vocabcheck; please report it "
          f"{REPORT_BUGS}", file=sys.stderr)
    return ExitCode.BUG


def console_main() -> None:
    """Console-script entry point."""
    sys.exit(main())
