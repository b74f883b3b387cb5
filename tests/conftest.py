"""Shared fixtures. Built once into pytest's cache directory (.pytest_cache/d/vocabcheck-fixtures-N) and reused
by later runs; a clean clone builds them in about a minute.

``cli`` runs the command line in this process; the model fixtures are real tokenizers and tiny seeded checkpoints
(:mod:`tests.support.fixtures`); ``materials`` are the hostile-input suites' originals
(:mod:`tests.support.fuzz_targets`)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support.fixtures import FIXTURE_VERSION, MISTRAL_SPM, ModelFactory, mistral_data
from tests.support.fuzz_targets import Materials
from tests.support.interrupting import fallback_handlers
from vocabcheck import atomic
from vocabcheck.cli import main
from vocabcheck.demo import qwen


class CliResult(NamedTuple):
    code: int
    out: str
    err: str


def _cli(*argv: object) -> CliResult:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def cli() -> Callable[..., CliResult]:
    """``cli("compare", a, b, "--json")`` runs the CLI in this process and returns (exit code, stdout, stderr);
    arguments are passed through ``str``. Session-scoped, so fixtures of any scope can use it."""
    return _cli


@pytest.fixture
def signal_fallbacks():
    """For tests that deliver SIGTERM or SIGHUP to this process: while they run, a signal the code under test does
    not handle raises UnhandledSignal instead of ending pytest."""
    with fallback_handlers():
        yield


@pytest.fixture(scope="session", autouse=True)
def _interruptible():
    """Ctrl-C works as in a terminal, also where the suite itself was started with SIGINT ignored (a background job of
    a script, ``nohup``, some CI runners): the tests of what Ctrl-C does would otherwise find it ignored in this
    process and in every process it starts (an ignored signal stays ignored across exec), and one would stream a
    million tokens waiting for it."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session", autouse=True)
def _offline(tmp_path_factory):
    """No test may reach the network or the user's caches."""
    home = tmp_path_factory.mktemp("hf-home")
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_HOME", "VOCABCHECK_CACHE", "HF_ENDPOINT",
                                            "TRANSFORMERS_VERBOSITY", "VOCABCHECK_DEBUG", "VOCABCHECK_HEARTBEAT_S")}
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HOME"] = str(home)
    os.environ["VOCABCHECK_CACHE"] = str(tmp_path_factory.mktemp("vocabcheck-cache"))
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    os.environ.pop("HF_ENDPOINT", None)
    os.environ.pop("VOCABCHECK_DEBUG", None)  # the tests check the one-line errors users get without it
    # no "still …" progress line in any test's stderr however slow the machine (tests of the heartbeat set their own)
    os.environ["VOCABCHECK_HEARTBEAT_S"] = "86400"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def fixture_root(request) -> Path:
    return Path(request.config.cache.mkdir(f"vocabcheck-fixtures-{FIXTURE_VERSION}"))


@pytest.fixture(scope="session")
def qwen25_json(fixture_root) -> Path:
    """The Qwen2.5 tokenizer.json rebuilt from qwen.tiktoken."""
    return qwen.cached_tokenizer_json(fixture_root / "tokenizers")


@pytest.fixture(scope="session")
def qwen25_text(qwen25_json) -> str:
    return qwen25_json.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def qwen3_json(fixture_root) -> Path:
    path = fixture_root / "tokenizers" / "qwen3.6-tokenizer.json"
    if not path.is_file():
        atomic.write_text(path, qwen.qwen36_tokenizer_json())
    return path


@pytest.fixture(scope="session")
def mistral_json(fixture_root):
    """tokenizer.json files converted from mistral-common's SentencePiece models, by version (v1, v2, v3, v7)."""
    from vocabcheck.sources.convert import from_sentencepiece

    def get(version: str) -> Path:
        path = fixture_root / "tokenizers" / f"mistral-{version}.json"
        if not path.is_file():
            atomic.write_text(path, from_sentencepiece(mistral_data() / MISTRAL_SPM[version]))
        return path

    return get


@pytest.fixture(scope="session")
def models(fixture_root, qwen25_json) -> ModelFactory:
    return ModelFactory(fixture_root / "models", qwen25_json)


@pytest.fixture(scope="session")
def qwen_pair(models) -> tuple[Path, Path]:
    """A Qwen2.5-shaped pair: target 152,064 rows untied and sharded, draft 151,936 rows tied."""
    return models.qwen_pair()


@pytest.fixture(scope="session")
def materials(fixture_root, qwen25_json, qwen_pair) -> Materials:
    """The fuzz and security suites' originals: a small tokenizer cut from Qwen2.5 and model directories around it,
    built once into the fixture cache."""
    target, draft = qwen_pair
    return Materials(fixture_root / "fuzz-1", qwen_json=qwen25_json, draft_dir=draft, target_dir=target)
