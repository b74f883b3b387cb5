"""A vocabcheck command run beside CPU burners: processes that spin (``while True: pass``) for as long as it runs, each
taking one CPU (half of a 2-core machine), in a fresh cache directory, as the busy-machine benchmarks need it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_beside(argv: Sequence[str], burners: int) -> subprocess.CompletedProcess:
    """``python -m vocabcheck ARGV`` from the checkout, with ``burners`` spinning processes beside it."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "VOCABCHECK_CACHE": cache, "HF_HUB_OFFLINE": "1"}
            return subprocess.run([sys.executable, "-m", "vocabcheck", *argv], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
    finally:
        for process in spinning:
            process.kill()
            process.wait()
