"""The options commands share are declared once (vocabcheck/cli/options.py): the same flags, help and defaults
wherever they appear; a value an option cannot take is one line and exit code 2, found while the command line is
parsed, before torch is imported or any model is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from vocabcheck.cli.app import app

SHARED = {
    "--no-probe": ("compare", "gate", "matrix", "align"),
    "--max-new-tokens": ("run", "bench"),
    "--temperature": ("run", "bench"),
    "--seed": ("run", "bench"),
    "--device": ("run", "bench"),
    "--dtype": ("run", "bench"),
    "--allow-incompatible": ("run", "bench"),
    "--translate": ("run", "bench"),
}


def option(command: str, flag: str):
    group = typer.main.get_command(app)
    found = [p for p in group.commands[command].params if flag in p.opts]
    assert len(found) == 1, (command, flag)
    return found[0]


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_option_is_the_same_in_every_command(flag):
    described = {command: (tuple(option(command, flag).opts), option(command, flag).help, option(command, flag).default)
                 for command in SHARED[flag]}
    assert len(set(described.values())) == 1, described
    assert all(help_text for _, help_text, _ in described.values()), f"{flag} has no help: {described}"


def test_the_dtypes_the_command_line_accepts_are_the_ones_the_decoder_resolves():
    from vocabcheck.cli.options import DTYPES
    from vocabcheck.decode.device import DTYPES as RESOLVED

    assert DTYPES == RESOLVED


@pytest.mark.parametrize("command", ["run", "bench"])
@pytest.mark.parametrize("option_value, words", [
    (["--device", "gpu"], "--device must be auto, cpu, cuda or cuda:N, not 'gpu'"),
    (["--dtype", "int8"], "--dtype must be one of auto, float32, bfloat16, float16, not 'int8'"),
    (["-k", "four"], "-k / --num-speculative-tokens must be between 1 and 64 or auto, not 'four'"),
    (["-k", "65"], "-k / --num-speculative-tokens must be between 1 and 64 or auto, not 65"),
    (["--seed", "1.5"], "--seed takes a whole number, not '1.5'"),
    (["--max-new-tokens", "x"], "--max-new-tokens takes a whole number, not 'x'"),
    (["--temperature", "hot"], "--temperature takes a number, not 'hot'"),
])
def test_a_value_an_option_cannot_take_is_one_line(cli, tmp_path, command, option_value, words):
    missing = tmp_path / "no-model-here"  # never opened: the value is refused while the command line is parsed
    extra = ["--prompt", "x"] if command == "run" else []
    code, out, err = cli(command, missing, missing, *extra, *option_value)
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: {words}"], err


@pytest.mark.parametrize("argv, words", [
    (["run", "{m}", "--prompt", "x", "--batch-size", "0"], "--batch-size must be at least 1, not 0"),
    (["bench", "{m}", "--repeat", "0"], "--repeat must be at least 1, not 0"),
    (["bench", "{m}", "--warmup", "-1"], "--warmup must be at least 0, not -1"),
    (["align", "{m}", "{m}", "-o", "{m}", "--tensor-parallel-size", "two"],
     "--tensor-parallel-size takes a whole number, not 'two'"),
])
def test_counts_are_checked_while_parsing(cli, tmp_path, argv, words):
    missing = str(tmp_path / "no-model-here")
    code, _, err = cli(*[a.replace("{m}", missing) for a in argv])
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: {words}"], err


def test_bench_needs_two_tokens_to_time_one(cli, tmp_path):
    code, _, err = cli("bench", tmp_path / "no-model-here", "--max-new-tokens", 1)
    assert code == 2
    assert err.strip().splitlines() == ["error: --max-new-tokens must be at least 2 for bench (time per output token "
                                        "counts the tokens after the first), not 1"]


def test_a_bad_device_is_refused_before_torch_is_imported(tmp_path):
    script = ("import sys\nfrom vocabcheck.cli.app import main\n"
              f"code = main(['run', {str(tmp_path)!r}, '--prompt', 'x', '--device', 'gpu'])\n"
              "print(code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert done.stderr.strip() == "error: --device must be auto, cpu, cuda or cuda:N, not 'gpu'"
