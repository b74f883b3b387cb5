"""A worker process that runs fuzz inputs one at a time, and the parent-side handle that watches it.

The worker reads one JSON line per input from stdin (a :class:`tests.support.fuzz_targets.Case`), runs
:func:`tests.support.fuzz_targets.run_case`, and answers one JSON line: the outcome (``ok``, ``error`` for the
project's own error, ``crash`` for anything else), the seconds it took, and the memory it added (peak resident set
size during the input, measured by resetting the kernel's high-water mark before each input). Its address space is
capped with ``RLIMIT_AS`` (what it maps once torch is imported, plus 6 GiB) so that a runaway allocation fails inside
the worker instead of hurting the machine.

The parent (:class:`Worker`) enforces the time bound: an input that takes longer is a hang; the worker is killed and
restarted. A worker that dies (a Rust panic that aborts, a segfault, the OOM killer) is a crash.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: the worker runs as ``python -m tests.support.fuzz_worker``
NOISE = ("panicked at", "Traceback (most recent call last)")  # what must never reach the terminal
ADDRESS_SPACE_HEADROOM = 6 << 30  # virtual memory the worker may map beyond what it holds once torch is imported


@dataclass
class Outcome:
    kind: str  # "ok", "error", "crash", "hang", "memory", "died", "noise"
    seconds: float
    peak_bytes: int = 0
    error: str = ""  # exception type
    message: str = ""
    traceback: str = ""


# --- worker side ----------------------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _classify(exc: BaseException) -> tuple[str, str]:
    from vocabcheck.errors import VocabcheckError

    if isinstance(exc, VocabcheckError):
        line = exc.one_line()
        problems = []
        if exc.exit_code != 2:
            problems.append(f"exit code {exc.exit_code}, expected 2")
        if not exc.where:
            problems.append("the error names no file")
        if "\n" in line or not line.strip():
            problems.append("not one line")
        if problems:
            return "crash", f"{type(exc).__name__} but {', '.join(problems)}: {line}"
        return "error", line
    return "crash", f"{type(exc).__name__}: {exc}"[:2000]


def serve() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import torch  # noqa: F401  (a CUDA build maps gigabytes of libraries: imported before the cap is set)

    limit = _status_kb("VmSize") * 1024 + ADDRESS_SPACE_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to the log, not into the protocol
    from tests.support import fuzz_targets
    from vocabcheck import errors  # noqa: F401  (imported before the first input is timed)

    protocol.write(json.dumps({"ready": True}) + "\n")
    log = os.dup(2)
    for line in sys.stdin:
        case = fuzz_targets.Case(**json.loads(line))
        _reset_peak()
        before = _status_kb("VmRSS") * 1024
        capture = tempfile.TemporaryFile()
        os.dup2(capture.fileno(), 1)
        os.dup2(capture.fileno(), 2)
        started = time.perf_counter()
        try:
            fuzz_targets.run_case(case)
            kind, message, trace, name = "ok", "", "", ""
        except BaseException as exc:  # noqa: BLE001  (classifying every exception is the point)
            kind, message = _classify(exc)
            name = type(exc).__name__
            trace = "" if kind == "error" else traceback.format_exc()
            if isinstance(exc, KeyboardInterrupt):
                raise
        seconds = time.perf_counter() - started
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log, 1)
        os.dup2(log, 2)
        capture.seek(0)
        printed = capture.read().decode("utf-8", "replace")
        capture.close()
        if printed:
            os.write(log, printed.encode())
        if kind in ("ok", "error") and any(mark in printed for mark in NOISE):
            # the CLI's promise is one line: a Rust panic report or a traceback on the terminal breaks it
            kind, trace = "noise", printed[-3000:]
            message = f"printed to the terminal while reading the input ({message or 'success'})"
        peak = max(0, _status_kb("VmHWM") * 1024 - before)
        outcome = Outcome(kind, seconds, peak, name, message, trace)
        protocol.write(json.dumps(asdict(outcome)) + "\n")


# --- parent side ----------------------------------------------------------------------------------------------


class Worker:
    """A worker process; :meth:`run` sends one case and waits at most ``limit`` seconds for its outcome."""

    def __init__(self, log: Path, env: dict[str, str] | None = None):
        self.log_path = log
        self.env = env
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        self.log = open(self.log_path, "ab")
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("TRANSFORMERS_VERBOSITY", "error")
        env["HF_HUB_OFFLINE"] = "1"
        # from the repository root, ``-m`` imports this checkout's tests.support and vocabcheck
        self.process = subprocess.Popen([sys.executable, "-m", "tests.support.fuzz_worker", "--serve"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                        cwd=str(ROOT))
        reply = self._read(120.0)
        if reply is None or not reply.get("ready"):
            raise RuntimeError(f"the fuzz worker did not start; see {self.log_path}")

    def _read(self, timeout: float) -> dict | None:
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.process.stdout.readline()
        if not line:
            return {"died": True}
        return json.loads(line)

    def run(self, case, limit: float, memory_limit: int) -> Outcome:
        if self.process is None or self.process.poll() is not None:
            self.start()
        assert self.process is not None and self.process.stdin is not None
        started = time.perf_counter()
        try:
            self.process.stdin.write((json.dumps(asdict(case)) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            return self._died(started)
        reply = self._read(limit)
        if reply is None:
            self.stop()
            return Outcome("hang", time.perf_counter() - started, message=f"no answer within {limit:.0f} s")
        if reply.get("died"):
            return self._died(started)
        outcome = Outcome(**reply)
        if outcome.kind in ("ok", "error") and outcome.peak_bytes > memory_limit:
            outcome.kind = "memory"
            outcome.message = (f"peak memory grew by {outcome.peak_bytes / 2**20:,.0f} MiB, over the "
                               f"{memory_limit / 2**20:,.0f} MiB bound ({outcome.message})")
        return outcome

    def _died(self, started: float) -> Outcome:
        assert self.process is not None
        code = self.process.wait()
        self.process = None
        self.restarts += 1
        tail = self.log_path.read_bytes()[-3000:].decode("utf-8", "replace")
        return Outcome("died", time.perf_counter() - started, message=f"worker exited with {code}", traceback=tail)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            self.restarts += 1

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if hasattr(self, "log"):
            self.log.close()


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
