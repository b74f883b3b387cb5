"""Signals on the command line (vocabcheck.interrupts): SIGINT, SIGTERM and SIGHUP stop any command with 130, 143 or
129, whatever the command is doing when they arrive: importing a module (the import completes first, so no module
is left half-imported and no C extension can swallow the interrupt), inside a library that swallows the exception,
or in the middle of replacing a directory. The handlers exist only while a command runs; library use installs none,
and a signal the process ignores stays ignored.

Signals are delivered at chosen points with signal.raise_signal (tests.support.interrupting), never after a
delay."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import vocabcheck
from tests.support.interrupting import UnhandledSignal, stops
from vocabcheck import atomic, interrupts

ROOT = Path(__file__).resolve().parent.parent
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
pytestmark = pytest.mark.usefixtures("signal_fallbacks")


def handlers() -> dict[int, object]:
    return {signum: signal.getsignal(signum) for signum in SIGNALS}


# --- where the handlers are -----------------------------------------------------------------------------------------


def test_the_handlers_are_there_while_a_command_runs_and_the_previous_ones_after(cli, monkeypatch, qwen25_json):
    before = handlers()
    seen = {}

    def recording(*args, **kwargs):
        seen.update(handlers())
        return real(*args, **kwargs)

    real = vocabcheck.compare
    monkeypatch.setattr(vocabcheck, "compare", recording)
    assert cli("compare", qwen25_json, qwen25_json)[0] == 0
    assert all(seen[s] is not before[s] and callable(seen[s]) for s in SIGNALS), seen
    assert handlers() == before


def test_library_use_installs_no_handlers(monkeypatch, qwen25_json):
    from vocabcheck import verdict

    before = handlers()
    seen = {}
    real = verdict.judge

    def recording(*args, **kwargs):
        seen.update(handlers())
        return real(*args, **kwargs)

    monkeypatch.setattr(verdict, "judge", recording)
    assert vocabcheck.compare(str(qwen25_json), str(qwen25_json)).verdict.value == "identical"
    assert seen == before


def test_a_signal_the_process_ignores_stays_ignored(cli, monkeypatch, qwen25_json):
    """Under nohup SIGHUP is ignored: a command keeps it so, and a hangup does not stop it."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        real = vocabcheck.compare

        def hung_up(*args, **kwargs):
            signal.raise_signal(signal.SIGHUP)
            return real(*args, **kwargs)

        monkeypatch.setattr(vocabcheck, "compare", hung_up)
        code, out, err = cli("compare", qwen25_json, qwen25_json, "--json")
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert code == 0 and json.loads(out)["verdict"] == "identical", err


# --- a signal during an import ---------------------------------------------------------------------------------------


class _SourceModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module, by name, from source text."""

    def __init__(self, name: str, source: str):
        self.name, self.source = name, source

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == self.name else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, f"<{self.name}>", "exec"), module.__dict__)


def serve_module(monkeypatch, name: str, source: str) -> None:
    monkeypatch.setattr(sys, "meta_path", [_SourceModule(name, source), *sys.meta_path])
    monkeypatch.delitem(sys.modules, name, raising=False)


# a module whose import gets a signal half-way, then goes on: it is complete only if COMPLETE is set
SIGNALLED_IMPORT = """
import signal
signal.raise_signal({signum})
import json  # more importing after the signal
COMPLETE = json.loads("true")
"""


@pytest.mark.parametrize(("how", "expected", "says"), stops("SIGINT", "SIGTERM", "SIGHUP"))
def test_a_signal_during_an_import_ends_the_command_once_the_import_is_complete(cli, monkeypatch, tmp_path,
                                                                                 qwen25_json, how, expected, says):
    name = f"_vocabcheck_signalled_{how}"
    serve_module(monkeypatch, name, SIGNALLED_IMPORT.format(signum=int(how)))
    after = tmp_path / "ran-on"

    def importing(*args, **kwargs):
        importlib.import_module(name)
        after.write_text("the command went on after the import")

    monkeypatch.setattr(vocabcheck, "compare", importing)
    code, _, err = cli("compare", qwen25_json, qwen25_json)
    assert code == expected and err.strip().splitlines() == says, err
    assert sys.modules[name].COMPLETE is True  # the module is whole: a later import sees all of it
    assert not after.exists()


FAILING_IMPORT = """
import signal
signal.raise_signal({signum})
raise ImportError("what C code that catches every error during an import turns the interrupt into")
"""


@pytest.mark.parametrize(("how", "expected", "says"), stops("SIGINT", "SIGTERM"))
def test_an_interrupt_an_import_turns_into_import_error_still_ends_the_command(cli, monkeypatch, tmp_path,
                                                                                qwen25_json, how, expected, says):
    """`try: import x / except ImportError:` around an import that fails after the signal arrived (torch turns a
    failure while it initialises NumPy into a warning): the interrupt is raised where the import returns."""
    name = f"_vocabcheck_failing_{how}"
    serve_module(monkeypatch, name, FAILING_IMPORT.format(signum=int(how)))
    after = tmp_path / "ran-on"

    def importing(*args, **kwargs):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
        after.write_text("the command went on after the import")

    monkeypatch.setattr(vocabcheck, "compare", importing)
    code, _, err = cli("compare", qwen25_json, qwen25_json)
    assert code == expected and err.strip().splitlines() == says, err
    assert not after.exists()


# --- a signal a library swallows ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("how", "expected", "says"), stops("SIGINT", "SIGTERM", "SIGHUP"))
def test_an_interrupt_a_library_swallows_still_sets_the_exit_code(cli, monkeypatch, qwen25_json, how, expected, says):
    real = vocabcheck.compare

    def swallowing(*args, **kwargs):
        try:
            signal.raise_signal(how)
        except BaseException:  # a __del__, a callback run from C, a bare except: the exception is gone
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(vocabcheck, "compare", swallowing)
    code, out, err = cli("compare", qwen25_json, qwen25_json, "--json")
    assert json.loads(out)["verdict"] == "identical"  # the command ran to its end
    assert code == expected, err
    assert err.strip().splitlines() == [interrupts.MESSAGES[how]], err


# --- a signal while a directory is replaced or cleaned up -----------------------------------------------------------


class _Module:
    """A module seen through a wrapper: ``replacements`` win over the real module's attributes."""

    def __init__(self, real, **replacements):
        self.real, self.replacements = real, replacements

    def __getattr__(self, name):
        return self.replacements.get(name) or getattr(self.real, name)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_a_signal_between_the_renames_that_replace_a_directory_waits_for_both(monkeypatch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("OLD")
    renames = []

    def replace(src, dst):
        os.replace(src, dst)
        renames.append(dst)
        if len(renames) == 1:  # the old directory is aside, the new one not yet in place
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(atomic, "os", _Module(os, replace=replace))
    with interrupts.handled():
        with pytest.raises(interrupts.Terminated):
            with atomic.directory(out) as tmp:
                (tmp / "new.txt").write_text("NEW")
    assert len(renames) == 2
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"] and leftovers(tmp_path) == []


def test_a_signal_during_the_cleanup_of_a_failed_write_waits_for_the_cleanup(monkeypatch, tmp_path):
    import shutil

    def rmtree(path, **kwargs):
        signal.raise_signal(signal.SIGTERM)
        shutil.rmtree(path, **kwargs)

    monkeypatch.setattr(atomic, "shutil", _Module(shutil, rmtree=rmtree))
    with interrupts.handled():
        with pytest.raises(interrupts.Terminated):
            with atomic.directory(tmp_path / "out") as tmp:
                (tmp / "half.txt").write_text("HALF")
                raise RuntimeError("the write failed")
    assert list(tmp_path.iterdir()) == []


def test_without_the_command_lines_handlers_a_signal_is_the_processs_own(monkeypatch, tmp_path):
    """Library use: atomic's deferral does nothing, the signal goes to whatever handler the process has."""
    def replace(src, dst):
        os.replace(src, dst)
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(atomic, "os", _Module(os, replace=replace))
    with pytest.raises(UnhandledSignal):
        with atomic.directory(tmp_path / "out") as tmp:
            (tmp / "new.txt").write_text("NEW")


# --- whole processes ------------------------------------------------------------------------------------------------

# `vocabcheck align` in a fresh process, with a signal delivered while torch, being imported, imports NumPy: the
# moment where torch's C++ code used to swallow Ctrl-C (the command ran on and wrote its output) or leave NumPy half
# imported (a later import failed: "module 'numpy' has no attribute 'ndarray'", exit code 3)
ALIGN_WITH_A_SIGNAL_DURING_NUMPYS_IMPORT = """
import importlib.abc, json, signal, sys

class SignalDuringNumpy(importlib.abc.MetaPathFinder):
    fired = False

    def find_spec(self, name, path=None, target=None):
        if name.startswith("numpy.") and "torch" in sys.modules and not SignalDuringNumpy.fired:
            SignalDuringNumpy.fired = True
            signal.raise_signal(int(sys.argv[1]))
        return None

assert "numpy" not in sys.modules and "torch" not in sys.modules
sys.meta_path.insert(0, SignalDuringNumpy())
from vocabcheck.cli.app import main
code = main(sys.argv[2:])
import numpy, torch  # whole, in the same process
total = float(torch.from_numpy(numpy.ones(3)).sum())
print(json.dumps({"code": code, "fired": SignalDuringNumpy.fired, "sum": total}))
"""


@pytest.mark.parametrize(("signum", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_torch_imports_numpy_stops_align(qwen_pair, tmp_path, signum, expected):
    target, draft = qwen_pair
    out = tmp_path / "aligned"
    done = subprocess.run([sys.executable, "-c", ALIGN_WITH_A_SIGNAL_DURING_NUMPYS_IMPORT, str(int(signum)),
                           "align", str(target), str(draft), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": expected, "fired": True, "sum": 3.0}, done.stderr
    assert not out.exists() and leftovers(tmp_path) == []
    assert "Traceback" not in done.stderr and "NumPy" not in done.stderr, done.stderr


# `python -m vocabcheck` with a signal while the command line's own modules are imported (typer)
MAIN_WITH_A_SIGNAL_DURING_TYPERS_IMPORT = """
import importlib.abc, runpy, signal, sys

SIGNUM = int(sys.argv[1])

class SignalDuringTyper(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "typer.main":
            sys.meta_path.remove(self)
            signal.raise_signal(SIGNUM)
        return None

sys.meta_path.insert(0, SignalDuringTyper())
sys.argv = ["vocabcheck", "--version"]
runpy.run_module("vocabcheck", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(("signum", "expected", "says"), [(signal.SIGINT, 130, "interrupted"),
                                                         (signal.SIGTERM, 143, "terminated (SIGTERM)")],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_python_m_vocabcheck_starts_is_one_line_and_its_exit_code(signum, expected, says):
    done = subprocess.run([sys.executable, "-c", MAIN_WITH_A_SIGNAL_DURING_TYPERS_IMPORT, str(int(signum))],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == expected, done.stderr
    assert done.stdout == ""  # stopped before the command ran
    assert done.stderr.splitlines() == [says]  # no traceback
