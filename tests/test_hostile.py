"""Hostile input to align, gate, bench and every human-readable view (issue #16): each case is one line and exit code
2 (or the view shows the data inertly), never a crash, a terabyte allocation, raw terminal escapes, or an output that
replaces another's."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from vocabcheck import rewrite


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def light_target(directory: Path, target: Path, **config) -> Path:
    """The target's config and tokenizer files without its weights (what align needs), ``config`` keys replaced."""
    directory.mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(target / name, directory / name)
    document = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**document, **config}))
    return directory


# --- row 2: a row count align would allocate ------------------------------------------------------------------------


def test_align_refuses_a_config_vocab_size_of_10_to_the_18_before_allocating(cli, tmp_path, qwen_pair):
    target = light_target(tmp_path / "target", qwen_pair[0], vocab_size=10**18)
    out = tmp_path / "aligned"
    code, _, err = cli("align", target, qwen_pair[1], "--out", out)
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"error: {target}: 1,000,000,000,000,000,000 rows (the target's config.json vocab_size)")
    assert f"more than {rewrite.MAX_ROWS:,} rows" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_align_refuses_a_sparse_checkpoint_of_2_to_the_36_rows_before_allocating(cli, tmp_path, qwen_pair):
    """A 64 GiB sparse safetensors file (a few blocks on disk) whose embedding claims 2³⁶ one-byte rows: the draft
    would be padded to 2³⁶ rows of its own width, 8 TiB."""
    rows = 2**36
    target = light_target(tmp_path / "target", qwen_pair[0], vocab_size=rows, tie_word_embeddings=True)
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "U8", "shape": [rows, 1], "data_offsets": [0, rows]},
                         "__metadata__": {"format": "pt"}}).encode()
    header += b" " * (-len(header) % 8)
    with open(target / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + rows)
    out = tmp_path / "aligned"
    code, _, err = cli("align", target, qwen_pair[1], "--out", out)
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"error: {target}: 68,719,476,736 rows (the target's checkpoint): ")
    assert f"more than {rewrite.MAX_ROWS:,} rows" in line
    assert not out.exists()


def test_align_refuses_matrices_larger_than_the_memory_available(cli, monkeypatch, tmp_path, qwen_pair):
    target, draft = qwen_pair
    monkeypatch.setattr(rewrite, "available_memory", lambda: 1 << 20)  # 1 MiB; the padded matrix is 18.6 MiB
    out = tmp_path / "aligned"
    code, _, err = cli("align", target, draft, "--out", out)
    assert code == 2
    line = one_line(err)
    assert line == (f"error: {target}: 152,064 rows (the target's checkpoint): align would allocate 18.6 MiB for the "
                    "resized matrices (152,064 × 32 F32) and 1.0 MiB of memory is available")
    assert not out.exists() and list(tmp_path.iterdir()) == []


# --- row 3: a gate manifest nested 900 deep -------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["[" * 900 + "]" * 900, "{a = " * 900 + "1" + "}" * 900])
def test_a_gate_manifest_nested_900_deep_is_one_line(cli, tmp_path, value):
    manifest = tmp_path / "gate.toml"
    manifest.write_text(f'[[pair]]\ntarget = {value}\ndraft = "b"\n', encoding="utf-8")
    junit = tmp_path / "junit.xml"
    code, _, err = cli("gate", manifest, "--junit", junit)
    assert code == 2
    assert one_line(err) == (f"error: {manifest}: arrays or inline tables nested too deeply for a gate manifest "
                             "(tomllib gives up at a few hundred levels)")
    assert not junit.exists()


# --- row 4: bench --report to a place it cannot write ---------------------------------------------------------------


def full_disk_on(monkeypatch, n: int) -> list[Path]:
    """The ``n``-th file vocabcheck.atomic writes fails as on a full disk; returns the paths it was asked to write."""
    import errno

    from vocabcheck import atomic

    real, paths = atomic.write_bytes, []

    def write_bytes(path, data):
        paths.append(Path(path))
        if len(paths) == n:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(atomic, "write_bytes", write_bytes)
    return paths


def bench_argv(target: Path, prompts: Path, report: Path) -> list:
    return ["bench", target, "--methods", "none", "--batch-sizes", "1", "--max-new-tokens", 4, "--repeat", 1,
            "--warmup", 0, "--prompts", prompts, "--device", "cpu", "--report", report]


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.txt"
    path.write_text("def fibonacci(n):\n")
    return path


@pytest.fixture
def no_benchmark(monkeypatch) -> list:
    """The benchmark's session, replaced by one that records that it was started (it must not be)."""
    from vocabcheck.decode import session

    started = []

    def start_session(*args, **kwargs):
        started.append(args)
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(session, "start_session", start_session)
    return started


def report_destinations(tmp_path: Path) -> list[tuple[Path, str]]:
    a_file = tmp_path / "bench-report"
    a_file.write_text("not a directory")
    with_a_directory = tmp_path / "with-a-directory"
    (with_a_directory / "bench.json").mkdir(parents=True)
    return [(a_file, f"error: {a_file}: --report exists and is not a directory"),
            (a_file / "report", f"error: {a_file / 'report'}: --report cannot be created: {a_file} is not a directory"),
            (with_a_directory, f"error: {with_a_directory / 'bench.json'}: is a directory; the benchmark report "
                               "writes a file of that name")]


def test_bench_refuses_a_report_destination_it_cannot_write_before_the_benchmark_runs(cli, tmp_path, qwen_pair,
                                                                                      prompts, no_benchmark):
    for report, expected in report_destinations(tmp_path):
        code, _, err = cli(*bench_argv(qwen_pair[0], prompts, report))
        assert code == 2 and one_line(err) == expected
    assert no_benchmark == []
    assert (tmp_path / "bench-report").read_text() == "not a directory"


def test_bench_report_onto_a_full_disk_is_one_line_and_leaves_nothing(cli, monkeypatch, tmp_path, qwen_pair,
                                                                      prompts):
    report = tmp_path / "reports" / "bench"
    written = full_disk_on(monkeypatch, 2)  # bench.md is written whole, then the disk is full
    code, _, err = cli(*bench_argv(qwen_pair[0], prompts, report))
    assert code == 2
    lines = err.strip().splitlines()  # a log gets bench's progress lines first (render/phases.py), then the error
    assert all(line.startswith("vocabcheck: ") for line in lines[:-1]), lines
    assert one_line(lines[-1]) == (f"error: {report / 'bench.json'}: cannot write the benchmark report: No space "
                                   "left on device")
    assert written == [report / "bench.md", report / "bench.json"]
    assert not (tmp_path / "reports").exists()  # no empty folder, no half report


# --- row 11: control characters from input never reach the terminal raw ---------------------------------------------

ESC_SEQUENCES = "\x1b[41mRED\x1b[0m \x1b]0;owned title\x07 \x9b31m"  # SGR, an OSC window title, a C1 CSI
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on (tab and newline are the views' own)


def hostile_model(tmp_path: Path, draft: Path, name: str = "model") -> Path:
    """The test draft with escape sequences in its config's architectures and model_type."""
    directory = tmp_path / name
    shutil.copytree(draft, directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(architectures=[ESC_SEQUENCES], model_type=ESC_SEQUENCES)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_escape_sequences_in_a_config_are_shown_not_obeyed(cli, tmp_path, qwen_pair):
    model = hostile_model(tmp_path, qwen_pair[1])
    visible = "\\x1b[41mRED\\x1b[0m \\x1b]0;owned title\\x07 \\x9b31m"
    code, out, err = cli("inspect", model)
    assert code == 0, err
    assert not RAW.search(out + err) and visible in out
    code, out, err = cli("compare", qwen_pair[0], model)
    assert code == 0, err
    assert not RAW.search(out + err) and "\\x1b[41mRED" in out  # in a narrow table column, folded
    code, out, _ = cli("inspect", model, "--json")
    assert code == 0 and json.loads(out)["architecture"] == ESC_SEQUENCES  # JSON keeps the exact data


def test_escape_sequences_in_file_names_are_shown_not_obeyed(cli, tmp_path, qwen_pair):
    model = hostile_model(tmp_path, qwen_pair[1], name="draft \x1b]0;owned\x07 \x1b[2J")
    markdown = tmp_path / "report.md"
    code, out, err = cli("compare", qwen_pair[0], model, "--markdown", markdown)
    assert code == 0, err
    assert not RAW.search(out + err) and "\\x1b" in out  # the path is folded in a table column
    text = markdown.read_text(encoding="utf-8")
    assert not RAW.search(text) and "draft \\x1b]0;owned\\x07 \\x1b[2J" in text


def test_escape_sequences_in_gate_pair_names_are_shown_not_obeyed(cli, tmp_path, qwen_pair):
    manifest = tmp_path / "gate.toml"
    manifest.write_text(f'[[pair]]\nname = "evil \\u001b[2J\\u001b]0;owned\\u0007"\ntarget = "{qwen_pair[0]}"\n'
                        f'draft = "{qwen_pair[1]}"\n', encoding="utf-8")
    reports = {flag: tmp_path / name for flag, name in (("--markdown", "gate.md"), ("--json", "gate.json"))}
    code, out, err = cli("gate", manifest, *(x for pair in reports.items() for x in pair))
    assert code == 0, err
    assert not RAW.search(out + err) and "\\x1b" in out  # the name is folded in a table column
    text = reports["--markdown"].read_text(encoding="utf-8")
    assert not RAW.search(text) and "| evil \\x1b[2J\\x1b]0;owned\\x07 |" in text
    assert json.loads(reports["--json"].read_text())["pairs"][0]["name"] == "evil \x1b[2J\x1b]0;owned\x07"


def test_usage_errors_quoting_the_command_line_are_escaped(cli):
    code, _, err = cli("\x1b[41mcompare")
    assert code == 2 and not RAW.search(err) and "'\\x1b[41mcompare'" in err


# --- row 12: ... nor the file prefix of an error line ---------------------------------------------------------------


def test_a_shard_name_with_escape_sequences_is_escaped_in_the_error_prefix_too(cli, tmp_path, qwen_pair):
    model = tmp_path / "model"
    shutil.copytree(qwen_pair[1], model)
    (model / "model.safetensors").unlink()
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": "\x1b[41mevil\x1b[0m.safetensors"}}))
    code, _, err = cli("inspect", model)
    assert code == 2
    line = one_line(err)
    assert not RAW.search(line)
    assert line.startswith(f"error: {model}/\\x1b[41mevil\\x1b[0m.safetensors: ")


def test_one_line_escapes_the_file_and_the_problem():
    from vocabcheck.errors import VocabcheckError

    error = VocabcheckError("bad \x1b[31mvalue\x9b", "dir/\x1b]0;t\x07name")
    assert error.one_line() == "dir/\\x1b]0;t\\x07name: bad \\x1b[31mvalue\\x9b"
    assert error.where == "dir/\x1b]0;t\x07name" and error.problem == "bad \x1b[31mvalue\x9b"  # the data, exact


# --- row 13: align onto a full disk ---------------------------------------------------------------------------------


def test_align_onto_a_full_disk_names_the_output_not_the_input(cli, monkeypatch, tmp_path, qwen_pair):
    import safetensors.torch
    from safetensors import SafetensorError

    def full_disk(tensors, filename, metadata=None):  # what safetensors raises when write(2) fails with ENOSPC
        Path(filename).write_bytes(b"\0" * 1024)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    target, draft = qwen_pair
    out = tmp_path / "aligned"
    code, _, err = cli("align", target, draft, "--out", out)
    assert code == 2
    assert one_line(err) == f"error: {out}: cannot write the aligned draft: No space left on device"
    assert list(tmp_path.iterdir()) == []  # no directory, no temporary directory


# --- row 14: two aligns to one --out at once ------------------------------------------------------------------------


def test_of_two_aligns_to_one_out_the_second_to_finish_exits_2_without_force(cli, monkeypatch, tmp_path,
                                                                             qwen_pair):
    """Both find --out free; the other align finishes while this one copies its files; this one must not replace
    what the other wrote."""
    from vocabcheck import aligner

    target, draft = qwen_pair
    out = tmp_path / "aligned"
    real_copy, other = aligner._copy, []

    def copy_while_the_other_align_finishes(src, dst):
        if not other:
            other.append(None)  # once: the other align copies its own files as usual
            other[0] = aligner.align_draft(str(target), str(draft), out)  # the other process, start to end
        real_copy(src, dst)

    monkeypatch.setattr(aligner, "_copy", copy_while_the_other_align_finishes)
    code, _, err = cli("align", target, draft, "--out", out)
    assert other and other[0].out == out
    assert code == 2
    assert one_line(err) == (f"error: {out}: --out exists and is not empty: it was written while align ran; pass "
                             "--force to replace it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aligned"]  # no temporary directory left
    monkeypatch.setattr(aligner, "_copy", real_copy)
    code, stdout, err = cli("compare", target, out, "--json")  # the other's draft, whole
    assert code == 0 and json.loads(stdout)["verdict"] == "identical", err


def test_with_force_the_second_align_replaces_the_first(cli, monkeypatch, tmp_path, qwen_pair):
    from vocabcheck import aligner

    target, draft = qwen_pair
    out = tmp_path / "aligned"
    real_copy = aligner._copy

    def copy_after_another_writer(src, dst):
        if not out.exists():
            out.mkdir()
            (out / "theirs.txt").write_text("the other writer's")
        real_copy(src, dst)

    monkeypatch.setattr(aligner, "_copy", copy_after_another_writer)
    code, _, err = cli("align", target, draft, "--out", out, "--force")
    assert code == 0, err
    assert not (out / "theirs.txt").exists() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aligned"]
