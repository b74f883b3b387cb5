"""Nothing half-written, Ctrl-C, SIGTERM, SIGHUP and bugs: a crash, Ctrl-C, SIGTERM or SIGHUP while a report, the
demo cache or an aligned draft is being written leaves the old file (or directory) or none, and the exit code says
what stopped the command (130, 143, 129); Ctrl-C during `run` prints the metrics so far and exits 130; an
unexpected exception is one line that says it is a bug and where to report it (exit code 3).

Each interruption happens at a chosen moment: an exception raised there, or a real signal delivered there
(tests.support.interrupting), never after a delay."""

from __future__ import annotations

import errno
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.interrupting import stop, stops
from vocabcheck import atomic
from vocabcheck.demo import qwen
from vocabcheck.errors import REPORT_BUGS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("signal_fallbacks")

# --- injecting a failure in the middle of a write ------------------------------------------------------------------


class _HalfWriter:
    """A file that takes half of what it is given, then stops (an exception or a signal)."""

    def __init__(self, real, how):
        self.real, self.how = real, how

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.real.close()
        return False

    def write(self, data):
        self.real.write(data[: len(data) // 2])
        self.real.flush()
        stop(self.how)

    def __getattr__(self, name):
        return getattr(self.real, name)


class _Os:
    """vocabcheck.atomic's view of the os module, with fdopen replaced."""

    def __init__(self, fdopen):
        self.fdopen = fdopen

    def __getattr__(self, name):
        return getattr(os, name)


def fail_nth_write(monkeypatch, n: int, how) -> list[int]:
    """The ``n``-th file vocabcheck.atomic writes (1-based) gets half its bytes, then ``how`` stops the command (an
    exception raised, or a signal delivered); returns the descriptors of the temporary files atomic opened."""
    opened: list[int] = []

    def fdopen(fd, mode="r", *args, **kwargs):
        real = os.fdopen(fd, mode, *args, **kwargs)
        opened.append(fd)
        return _HalfWriter(real, how) if len(opened) == n else real

    monkeypatch.setattr(atomic, "os", _Os(fdopen))
    return opened


def leftovers(directory: Path) -> list[str]:
    """Temporary files or directories that atomic writes leave only while they run."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and
                  (p.name.endswith(".tmp") or p.name.endswith(".old")))


@pytest.fixture
def small_pair(tmp_path, qwen25_json):
    """The Qwen2.5 tokenizer twice, one of them with another normalizer: a quick compare with findings."""
    document = json.loads(qwen25_json.read_text(encoding="utf-8"))
    document["normalizer"] = None
    other = tmp_path / "models" / "no-nfc.json"
    other.parent.mkdir()
    other.write_text(json.dumps(document))
    return qwen25_json, other


FULL_DISK = OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(("how", "expected", "says"), [
    *stops("KeyboardInterrupt", "SIGINT", "SIGTERM", "SIGHUP"),
    pytest.param(FULL_DISK, 2, None, id="full-disk"),
    pytest.param(RuntimeError("the disk went away"), 3, None, id="bug"),
])
@pytest.mark.parametrize("n", [1, 2])
def test_compare_report_files_are_old_or_new_never_half(cli, monkeypatch, tmp_path, small_pair, how, expected, says,
                                                        n):
    target, draft = small_pair
    out = tmp_path / "out"
    out.mkdir()
    json_file, markdown = out / "report.json", out / "report.md"
    json_file.write_text("OLD JSON")
    markdown.write_text("OLD MARKDOWN")
    fail_nth_write(monkeypatch, n, how)
    code, _, err = cli("compare", target, draft, "--json-file", json_file, "--markdown", markdown)
    assert code == expected, err
    assert "Traceback" not in err, err
    if says is not None:  # Ctrl-C: exit code 130 and nothing more (typer ends silently); SIGTERM, SIGHUP: one line
        assert err.strip().splitlines() == says, err
    elif expected == 2:  # a full disk: one line naming the file
        assert err.startswith(f"error: {json_file if n == 1 else markdown}: cannot write: No space left on device")
        assert len(err.strip().splitlines()) == 1, err
    else:  # a bug: one line that says so
        assert len(err.strip().splitlines()) == 1 and err.startswith("internal error: RuntimeError"), err
    # files are written in the order given: --json-file first, whole before --markdown starts
    if n == 1:
        assert json_file.read_text() == "OLD JSON"
    else:
        assert json.loads(json_file.read_text())["schema"] == "vocabcheck.compare/1"
    assert markdown.read_text() == "OLD MARKDOWN"
    assert leftovers(out) == []


@pytest.mark.parametrize(("how", "expected", "says"), stops("KeyboardInterrupt", "SIGTERM"))
def test_an_interrupted_first_report_leaves_no_file(cli, monkeypatch, tmp_path, small_pair, how, expected, says):
    target, draft = small_pair
    path = tmp_path / "new" / "report.json"
    fail_nth_write(monkeypatch, 1, how)
    assert cli("compare", target, draft, "--json-file", path)[0] == expected
    assert not path.exists() and leftovers(path.parent) == []


@pytest.fixture
def tokenizer_models(tmp_path, qwen25_json):
    made = []
    for name in ("a", "b"):
        directory = tmp_path / "gate-models" / name
        directory.mkdir(parents=True)
        (directory / "tokenizer.json").symlink_to(qwen25_json)
        made.append(directory)
    return made


@pytest.mark.parametrize(("how", "expected", "says"), stops("KeyboardInterrupt", "SIGTERM", "SIGHUP"))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_gate_reports_are_old_or_new_never_half(cli, monkeypatch, tmp_path, tokenizer_models, n, how, expected, says):
    a, b = tokenizer_models
    manifest = tmp_path / "gate.toml"
    manifest.write_text(f'[[pair]]\nname = "a+b"\ntarget = "{a}"\ndraft = "{b}"\nexpect = "identical"\n')
    out = tmp_path / "out"
    out.mkdir()
    files = {"--junit": out / "junit.xml", "--json": out / "gate.json", "--markdown": out / "gate.md"}
    for path in files.values():
        path.write_text("OLD")
    fail_nth_write(monkeypatch, n, how)
    argv = ["gate", manifest] + [str(x) for pair in files.items() for x in pair]
    code, _, err = cli(*argv)
    assert code == expected and err.strip().splitlines() == says, err
    # write_outputs writes --junit, --json, --markdown in that order: the ones before n are new and whole
    written = [files["--junit"], files["--json"], files["--markdown"]]
    for index, path in enumerate(written, start=1):
        text = path.read_text()
        if index < n:
            assert text != "OLD"
            if path.suffix == ".json":
                assert json.loads(text)["schema"] == "vocabcheck.gate/1"
            elif path.suffix == ".xml":
                assert text.rstrip().endswith("</testsuites>")
        else:
            assert text == "OLD"
    assert leftovers(out) == []


@pytest.mark.parametrize(("how", "expected", "says"), stops("KeyboardInterrupt", "SIGTERM"))
def test_bench_report_files_are_old_or_new_never_half(cli, monkeypatch, tmp_path, qwen_pair, how, expected, says):
    target, _ = qwen_pair
    report = tmp_path / "bench"
    report.mkdir()
    names = ("bench.md", "bench.json", "tpot.png", "acceptance.png")
    for name in names:
        (report / name).write_bytes(b"OLD")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def fibonacci(n):\n")
    fail_nth_write(monkeypatch, 2, how)  # bench.md is written whole, bench.json is interrupted
    code, _, err = cli("bench", target, "--methods", "none", "--batch-sizes", "1", "--max-new-tokens", 4,
                       "--repeat", 1, "--warmup", 0, "--prompts", prompts, "--device", "cpu", "--report", report)
    assert code == expected, err
    assert (report / "bench.md").read_bytes() != b"OLD" and (report / "bench.md").read_text().rstrip().endswith(")")
    for name in names[1:]:
        assert (report / name).read_bytes() == b"OLD"
    assert leftovers(report) == []


@pytest.mark.parametrize(("how", "expected", "says"), stops("KeyboardInterrupt", "SIGINT", "SIGTERM", "SIGHUP"))
def test_an_interrupted_align_leaves_no_directory_or_the_old_one(cli, monkeypatch, tmp_path, qwen_pair, how,
                                                                 expected, says):
    from vocabcheck import aligner

    target, draft = qwen_pair
    real_copy = aligner._copy
    calls = []

    def copy_then_stop(src, dst):
        real_copy(src, dst)
        calls.append(dst)
        stop(how)  # the shards and the config are written, the tokenizer files are being copied

    monkeypatch.setattr(aligner, "_copy", copy_then_stop)
    out = tmp_path / "aligned"
    code, _, err = cli("align", target, draft, "--out", out)
    assert code == expected and err.strip().splitlines() == says, err
    assert calls and not out.exists() and leftovers(tmp_path) == []

    out.mkdir()
    (out / "old.txt").write_text("OLD")
    assert cli("align", target, draft, "--out", out, "--force")[0] == expected
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"] and leftovers(tmp_path) == []


@pytest.mark.parametrize(("how", "expected", "says"), stops("KeyboardInterrupt", "SIGTERM"))
def test_an_interrupted_demo_build_leaves_no_cache_or_the_old_one(cli, monkeypatch, tmp_path, qwen25_json, how,
                                                                  expected, says):
    from types import SimpleNamespace

    from vocabcheck.demo import pair as demo_pair_module
    from vocabcheck.demo.checkpoint import ModelShape

    report = SimpleNamespace(target_steps=0, corpus_tokens=0, corpus_files=0, compact_vocab=0, coverage=0.0,
                             target_loss=0.0, draft_steps=0, draft_kl=0.0, seconds=0.0)
    monkeypatch.setattr(demo_pair_module, "train_pair", lambda *args, **kwargs: (None, None, report))
    monkeypatch.setattr(demo_pair_module, "TARGET_SHAPE", ModelShape(rows=152064, hidden=8, layers=1, heads=2,
                                                                     kv_heads=1, intermediate=16, tied=False))
    monkeypatch.setattr(demo_pair_module, "DRAFT_SHAPE", ModelShape(rows=151936, hidden=8, layers=1, heads=2,
                                                                    kv_heads=1, intermediate=16, tied=True))
    real_write = demo_pair_module.write_model
    written = []

    def write_then_stop(directory, *args, **kwargs):
        if written:  # the target is written; the draft is stopped half-way through its files
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "config.json").write_text("{")
            stop(how)
        written.append(real_write(directory, *args, **kwargs))
        return written[-1]

    monkeypatch.setattr(demo_pair_module, "write_model", write_then_stop)
    root = tmp_path / "cache"
    monkeypatch.setenv("VOCABCHECK_CACHE", str(root))
    (root / "tokenizers").mkdir(parents=True)
    shutil.copyfile(qwen25_json, root / "tokenizers" / qwen25_json.name)  # the tokenizer cache, as built
    code, _, err = cli("demo", "--no-bench")
    assert code == expected and all(line in err.splitlines() for line in says) and "Traceback" not in err, err
    assert written  # the target was complete before the interruption
    assert sorted(p.name for p in root.iterdir()) == ["tokenizers"]  # no pair, no temporary directory

    monkeypatch.setattr(demo_pair_module, "write_model", real_write)
    built = demo_pair_module.demo_pair(root=root)
    assert built.built and (built.target / "config.json").is_file() and (built.draft / "config.json").is_file()
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))

    written.clear()
    monkeypatch.setattr(demo_pair_module, "write_model", write_then_stop)
    assert cli("demo", "--no-bench", "--rebuild")[0] == expected
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before  # the old pair, untouched
    assert demo_pair_module.demo_pair(root=root).built is False


def test_atomic_write_leaves_no_temporary_file_on_failure(monkeypatch, tmp_path):
    path = tmp_path / "file.txt"
    path.write_text("OLD")
    fail_nth_write(monkeypatch, 1, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(path, "NEW" * 1000)
    assert path.read_text() == "OLD" and leftovers(tmp_path) == []


# --- a signal during run -------------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# `vocabcheck run` as its console script runs it, and one line on a pipe once tokens stream from inside the decoding
# loop: the first call of on_tokens prints the token the prefill chose, the second the first step's tokens
STREAMING = b"streaming\n"
RUN_REPORTING_WHEN_STREAMING = f"""
import os, sys
from vocabcheck.render import terminal

ready, calls, real = int(sys.argv[1]), [], terminal.StreamPrinter.on_tokens

def on_tokens(self, row, ids):
    real(self, row, ids)
    calls.append(len(ids))
    if len(calls) == 2:
        os.write(ready, {STREAMING!r})

terminal.StreamPrinter.on_tokens = on_tokens
from vocabcheck.cli.app import console_main
sys.argv = ["vocabcheck", *sys.argv[2:]]
console_main()
"""


@pytest.fixture(scope="module")
def endless_pair(models):
    """The Qwen2.5-shaped pair with no end-of-sequence token anywhere (generation_config, config, tokenizer_config):
    generation ends only at --max-new-tokens, so a test can rely on it still running when its signal arrives."""
    tokenizer_config = {**qwen.tokenizer_config(), "eos_token": None}
    generation_config = {k: v for k, v in qwen.generation_config().items() if k != "eos_token_id"}
    target = models.model("qwen-target-152064-no-eos", rows=qwen.ROWS_LARGE, tied=False, seed=1,
                          tokenizer_config=tokenizer_config, generation_config=generation_config)
    draft = models.model("qwen-draft-151936-no-eos", rows=qwen.ROWS_SMALL, tied=True, seed=2,
                         tokenizer_config=tokenizer_config, generation_config=generation_config)
    return target, draft


@pytest.mark.parametrize(("signum", "expected", "says"), [
    (signal.SIGINT, 130, ["interrupted: the metrics cover what was generated so far", "acceptance rate",
                          "time per output token", "tokens/s"]),
    (signal.SIGTERM, 143, ["terminated (SIGTERM)"]),
], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_run_streams_stops_it_with_its_exit_code(endless_pair, tmp_path, signum, expected, says):
    """`vocabcheck run` in a terminal streams its text; Ctrl-C once tokens are streaming stops generation, prints the
    metrics of what was generated, and exits 130; SIGTERM stops it with 143. The signal is sent when the program
    says tokens are streaming from inside the decoding loop; a million new tokens cannot be done by then."""
    target, draft = endless_pair
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "COLUMNS": "160",
           "VOCABCHECK_CACHE": str(tmp_path / "cache"), "TRANSFORMERS_VERBOSITY": "error", "TERM": "xterm"}
    primary, secondary = pty.openpty()
    ready_read, ready_write = os.pipe()
    process = subprocess.Popen([sys.executable, "-c", RUN_REPORTING_WHEN_STREAMING, str(ready_write), "run",
                                str(target), str(draft), "--prompt", "Once upon a time", "--max-new-tokens",
                                "4000", "--device", "cpu"],  # the most its context (4,096) holds: streams for seconds
                               stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, env=env, cwd=ROOT,
                               pass_fds=(ready_write,), start_new_session=True)
    os.close(secondary)
    os.close(ready_write)
    output, signalled = b"", None
    try:
        while True:  # read the terminal until the program closes it, and signal it when it says it streams
            readable, _, _ = select.select([primary] + ([] if signalled else [ready_read]), [], [], 600)
            assert readable, "nothing for 10 minutes: " + output.decode("utf-8", "replace")[-2000:]
            # a bound on a failure, not a timing: a stopped program ends in well under a second
            assert signalled is None or time.monotonic() - signalled < 600, "streaming 10 minutes after the signal"
            if ready_read in readable:
                line = os.read(ready_read, 64)
                assert line == STREAMING, f"the program ended before streaming: {output[-2000:]!r}"
                process.send_signal(signum)
                signalled = time.monotonic()
            if primary in readable:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # EIO: the program closed the terminal
                    chunk = b""
                if not chunk:
                    break
                output += chunk
        code = process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)
        os.close(ready_read)
    text = ANSI.sub("", output.decode("utf-8", "replace"))
    assert code == expected, text[-3000:]
    for words in says:
        assert words in text, (words, text[-3000:])
    assert "Traceback" not in text


# --- bugs: exit code 3 -----------------------------------------------------------------------------------------------


def _boom(*args, **kwargs):
    raise ZeroDivisionError("division by zero in the verdict")


def test_an_unexpected_exception_is_one_line_naming_a_bug_and_where_to_report_it(cli, monkeypatch, small_pair):
    import vocabcheck

    monkeypatch.setattr(vocabcheck, "compare", _boom)
    code, out, err = cli("compare", *small_pair)
    assert code == 3
    assert err.strip().splitlines() == [
        "internal error: ZeroDivisionError: division by zero in the verdict — this is a bug in vocabcheck; please "
        f"report it {REPORT_BUGS}"]
    assert "Traceback" not in err


def test_debug_adds_the_traceback_of_a_bug(cli, monkeypatch, small_pair):
    import vocabcheck

    monkeypatch.setattr(vocabcheck, "compare", _boom)
    code, _, err = cli("--debug", "compare", *small_pair)
    assert code == 3
    assert err.startswith("Traceback (most recent call last):")
    assert "in _boom" in err and "ZeroDivisionError: division by zero in the verdict" in err
    assert err.strip().splitlines()[-1].startswith("internal error: ZeroDivisionError:")


def test_a_rust_panic_is_a_bug_too(cli, monkeypatch, small_pair):
    """PyO3 raises a Rust panic as pyo3_runtime.PanicException, a BaseException: still one line and exit code 3."""
    import vocabcheck

    PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})

    def panic(*args, **kwargs):
        raise PanicException("index out of bounds: the len is 3 but the index is 7")

    monkeypatch.setattr(vocabcheck, "compare", panic)
    code, _, err = cli("compare", *small_pair)
    assert code == 3
    assert err.strip().splitlines() == [
        "internal error: PanicException: index out of bounds: the len is 3 but the index is 7 — this is a bug in "
        f"vocabcheck; please report it {REPORT_BUGS}"]


def test_the_console_script_exits_with_3_for_a_bug(tmp_path, small_pair):
    """The installed entry point's process exit status, not only main()'s return value."""
    script = ("import sys, vocabcheck\n"
              "def boom(*a, **k):\n    raise KeyError('no such key')\n"
              "vocabcheck.compare = boom\n"
              "from vocabcheck.cli.app import console_main\n"
              f"sys.argv = ['vocabcheck', 'compare', {str(small_pair[0])!r}, {str(small_pair[1])!r}]\n"
              "console_main()\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=ROOT)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines() == [
        "internal error: KeyError: 'no such key' — this is a bug in vocabcheck; please report it "
        f"{REPORT_BUGS}"]



def test_the_readme_exit_code_table_lists_exactly_the_codes_the_commands_use():
    """ExitCode is the one home of the exit codes; the README's table must name each of them and no other."""
    import re
    from pathlib import Path

    from vocabcheck.errors import ExitCode
    from vocabcheck.interrupts import EXIT_CODES

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    listed = {int(code) for row in re.findall(r"^\| ([\d, ]+) \|", readme, re.M) for code in row.split(",")}
    assert listed == {int(code) for code in ExitCode}
    assert EXIT_CODES <= set(ExitCode)
