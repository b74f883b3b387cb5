"""Hostile input, round 3 (issue #23): hostile tokenizer decoders and normalizers, unbounded work on the translation
path, output paths that are not files, start-up Ctrl-C. Each test names the issue's row it covers; every input is built
here, small on disk, and the cap acts before the cost (each test finishes in seconds)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def tiny_tokenizer(path: Path, tokens: list[str], *, decoder=None, normalizer=None, model=None) -> Path:
    """A BPE tokenizer.json of ``tokens`` (ids in order, no merges) with the given decoder and normalizer."""
    bpe = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
           "vocab": {token: i for i, token in enumerate(tokens)}, "merges": []}
    document = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": normalizer,
                "pre_tokenizer": None, "post_processor": None,
                "decoder": decoder if decoder is not None else {"type": "Fuse"}, "model": {**bpe, **(model or {})}}
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581", " "]


def pair(tmp_path: Path, **draft) -> tuple[Path, Path]:
    """A plain target and a draft with the given decoder/normalizer/model: different tokenizers, so compare
    translates."""
    target = tiny_tokenizer(tmp_path / "target.json", LETTERS + ["ab", "cd"])
    return target, tiny_tokenizer(tmp_path / "draft.json", draft.pop("tokens", LETTERS + ["ef"]), **draft)


# --- row 6: C1 controls and bidi overrides in --json --------------------------------------------------------------

RAW = ("\x9b", "\u202e", "\u2066", "\x85")


def test_row6_json_escapes_c1_controls_and_bidi_overrides_on_stdout_and_in_files(cli, tmp_path):
    hostile = ["x\x9b31mred", "evil\u202etxt.exe", "iso\u2066late", "nel\x85"]
    target = tiny_tokenizer(tmp_path / "target.json", LETTERS + hostile)
    draft = tiny_tokenizer(tmp_path / "draft.json", LETTERS + hostile[::-1])
    out_file = tmp_path / "report.json"
    code, out, err = cli("compare", target, draft, "--no-probe", "--json", "--json-file", out_file)
    assert code in (0, 1), err
    written = out_file.read_text(encoding="utf-8")
    for text in (out, written):
        assert not any(c in text for c in RAW), [c for c in RAW if c in text]
        assert "\\u009b" in text and "\\u202e" in text  # escaped, not dropped
    assert json.loads(out) == json.loads(written)
    code, out, _ = cli("inspect", draft, "--json")
    assert code == 0 and not any(c in out for c in RAW)


# --- row 7: output paths that are not regular files ---------------------------------------------------------------


def special_files(directory: Path) -> list[tuple[Path, int]]:
    """A FIFO and a Unix socket's node (each (path, file type))."""
    import socket

    fifo = directory / "fifo"
    os.mkfifo(fifo)
    sock = directory / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(sock))  # the node stays when the socket is closed
    return [(fifo, stat.S_IFIFO), (sock, stat.S_IFSOCK)]


def test_row7_writers_refuse_a_fifo_or_a_socket_and_leave_it_in_place(cli, tmp_path):
    target, draft = pair(tmp_path)
    manifest = tmp_path / "gate.toml"
    manifest.write_text(f'[[pair]]\ntarget = "{target}"\ndraft = "{draft}"\nexpect = "incompatible"\n')
    for path, kind in special_files(tmp_path):
        for argv in (["compare", target, draft, "--no-probe", "--json-file", path],
                     ["compare", target, draft, "--no-probe", "--markdown", path],
                     ["gate", manifest, "--junit", path], ["gate", manifest, "--markdown", path],
                     ["gate", manifest, "--json-file", path]):
            code, _, err = cli(*argv)
            assert code == 2, (argv, err)
            line = one_line(err)
            assert str(path) in line and "not a regular file" in line, line
            assert stat.S_IFMT(os.lstat(path).st_mode) == kind, argv  # still the FIFO / the socket
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.parametrize("command, name", [("bench", "bench.json"), ("bench", "tpot.png"),
                                           ("predict", "predict.md"), ("predict", "speedup.png")])
def test_row7_a_report_file_that_is_a_fifo_or_a_socket_is_refused_before_any_model_loads(cli, tmp_path, monkeypatch,
                                                                                          command, name):
    """``--report DIR`` whose DIR/bench.json (or any report file) is a FIFO or a socket: the same one line that the
    write after minutes of measuring would give, at once — no model is profiled, loaded or run."""
    from vocabcheck import check
    from vocabcheck.decode import session
    from vocabcheck.predict import predictor

    def never(*args, **kwargs):
        raise AssertionError("a model was read before the report directory was checked")

    for module, attribute in ((session, "start_session"), (check, "compare"), (predictor, "predict")):
        monkeypatch.setattr(module, attribute, never)
    target, draft = pair(tmp_path)
    for kind in ("fifo", "sock"):
        report = tmp_path / f"report-{command}-{kind}"
        report.mkdir()
        (made,) = [(path, mode) for path, mode in special_files(report) if path.name == kind]
        os.rename(made[0], report / name)
        argv = [command, target, draft, "--report", report] + (["--prompt", "x"] if command == "predict" else [])
        code, out, err = cli(*argv)
        assert code == 2, (argv, err)
        line = one_line(err)
        assert str(report / name) in line and "not a regular file" in line and "cannot write the" in line, line
        assert out == ""
        assert stat.S_IFMT(os.lstat(report / name).st_mode) == made[1]  # left in place
        assert sorted(p.name for p in report.iterdir()) == sorted([name, "fifo" if kind == "sock" else "sock"])


def test_row7_json_file_naming_standard_output_writes_through_to_it(tmp_path):
    """``--json-file /dev/stdout`` (here a link of the test's own to /proc/self/fd/1, so that a writer that replaces
    the link harms nothing outside the test) writes the document to standard output and leaves the link."""
    import subprocess
    import sys

    target, draft = pair(tmp_path)
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    done = subprocess.run([sys.executable, "-m", "vocabcheck", "compare", target, draft, "--no-probe",
                           "--json-file", stdout], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode in (0, 1), done.stderr
    document, _ = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{\n"))  # beside the terminal report
    assert document["schema"] == "vocabcheck.compare/1"
    assert stdout.is_symlink()


# --- row 5: thousands of tokens that decode to the same bytes ------------------------------------------------------


def test_row5_the_duplicate_id_list_is_capped_in_the_message_and_the_json(cli, tmp_path):
    """2,000 draft tokens 'a0000'..'a1999' that a decoder deleting every digit turns into 'a': the finding names the
    count and the first few ids, in every view, as other findings do."""
    digits = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": str(d)}, "content": ""}
                                               for d in range(10)] + [{"type": "Fuse"}]}
    target, draft = pair(tmp_path, tokens=LETTERS + [f"a{n:04d}" for n in range(2000)], decoder=digits)
    code, out, err = cli("compare", target, draft, "--no-probe", "--json")
    assert code in (0, 1), err
    document = json.loads(out)
    finding = next(f for f in document["findings"] if f["code"] == "translation.intersection")
    assert "2,000 draft tokens repeat the bytes of another" in finding["message"]
    assert "(and 1,996 more)" in finding["message"] and ", 1500," not in finding["message"]
    assert len(finding["message"]) < 1000
    first = document["translation"]["duplicates"]["draft"]["first"][0]
    assert first["id_count"] == 2001 and len(first["ids"]) == 20 and first["ids"][0] == 0
    for view in (["compare", target, draft, "--no-probe"], ["compare", target, draft, "--no-probe", "--markdown",
                                                             tmp_path / "report.md"]):
        code, out, err = cli(*view)
        assert code in (0, 1), err
        text = out + ((tmp_path / "report.md").read_text() if "--markdown" in view else "")
        assert ", 1500," not in text and "1,996" in text


# --- row 9: model settings the tokenizers library refuses, without the probe ---------------------------------------


def unigram_tokenizer(path: Path, unk_id) -> Path:
    document = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                "post_processor": None, "decoder": {"type": "Fuse"},
                "model": {"type": "Unigram", "unk_id": unk_id, "byte_fallback": False,
                          "vocab": [[token, -1.0 - i] for i, token in enumerate(LETTERS)]}}
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind, value, words", [
    ("dropout", 5, ["Dropout should be between 0 and 1"]),
    ("dropout", -0.5, ["Dropout should be between 0 and 1"]),
    ("dropout", "x", ["invalid type", "f32"]),
    ("unk_id", 10**6, ["unk_id 1,000,000", "28 pieces"]),
    ("unk_id", -1, ["unk_id -1 is", "28 pieces"]),
    ("unk_id", "x", ["invalid type", "usize"]),
])
def test_row9_model_settings_the_library_refuses_are_refused_without_the_probe(cli, tmp_path, kind, value, words):
    if kind == "dropout":
        bad = tiny_tokenizer(tmp_path / "bad.json", LETTERS, model={"dropout": value})
    else:
        bad = unigram_tokenizer(tmp_path / "bad.json", value)
    good = tiny_tokenizer(tmp_path / "good.json", LETTERS + ["ab"])
    out = tmp_path / "aligned"
    for argv in (["inspect", bad], ["inspect", bad, "--json"], ["compare", good, bad, "--no-probe"],
                 ["compare", bad, good, "--no-probe", "--json"], ["compare", good, bad],
                 ["align", good, bad, "--out", out, "--no-probe"]):
        code, _, err = cli(*argv)
        assert code == 2, (argv, err)
        line = one_line(err)
        assert str(bad) in line and "cannot load this tokenizer" in line, line
        for word in words:
            assert word in line, line
    assert not out.exists()


# --- row 13: Ctrl-C in the first moments of start-up ---------------------------------------------------------------

EARLY_SIGNAL = """
import os, runpy, signal, sys
when = sys.argv[1]
def arrive(event, args):  # Ctrl-C at the moment the named module starts to import
    if event == "import" and args[0] == when:
        os.kill(os.getpid(), signal.SIGINT)
sys.addaudithook(arrive)
sys.argv = ["vocabcheck", "--version"]
runpy.run_module("vocabcheck", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["vocabcheck.interrupts", "typer", "vocabcheck.cli.app"])
def test_row13_ctrl_c_during_start_up_is_exit_130_and_one_line(tmp_path, module):
    """The signal arrives while ``python -m vocabcheck`` imports ``module``: from the command line's first instruction
    on, that is exit code 130 and the line 'interrupted', never a traceback."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", EARLY_SIGNAL, module], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr == "interrupted\n", done.stderr


# --- rows 1-3: decoder steps that cost more than the vocabulary's size ---------------------------------------------


def compare_json(cli, target: Path, draft: Path, *more) -> dict:
    code, out, err = cli("compare", target, draft, "--json", *more)
    assert code in (0, 1), err
    return json.loads(out)


def test_row1_a_strip_of_10_to_the_18_characters_strips_at_most_the_token(tmp_path):
    """Strip('x', start=10¹⁸) before a Fuse (the tokenizers library takes any usize): each token loses its leading
    'x's, as the library decodes it, in the time the vocabulary takes. Run as a command with a deadline, since the
    unbounded loop it replaces never ends."""
    import subprocess
    import sys

    strip = {"type": "Sequence", "decoders": [{"type": "Strip", "content": "x", "start": 10**18, "stop": 0},
                                              {"type": "Fuse"}]}
    target, draft = pair(tmp_path, tokens=LETTERS + ["xxab", "xcd"], decoder=strip)
    done = subprocess.run([sys.executable, "-m", "vocabcheck", "compare", target, draft, "--json"],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode in (0, 1), done.stderr
    translation = json.loads(done.stdout)["translation"]
    # the letters, '▁' and ' ' pair with themselves except 'x' (it strips to nothing); 'xxab' is 'ab', 'xcd' is 'cd'
    assert translation["translatable"] and translation["shared_tokens"] == 28 - 1 + 2
    from tokenizers import Tokenizer

    library = Tokenizer.from_file(str(draft))
    assert [library.decode([i]) for i in (23, 28, 29)] == ["", "ab", "cd"]  # what the library decodes, too


def test_row2_a_replacement_that_would_grow_a_token_past_its_budget_is_one_line(cli, tmp_path):
    huge = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                              "content": "X" * 100_000}, {"type": "Fuse"}]}
    target, draft = pair(tmp_path, tokens=LETTERS + [f"\u2581{n:04d}" for n in range(1000)], decoder=huge)
    for more in ((), ("--no-probe",), ("--json",)):
        code, _, err = cli("compare", target, draft, *more)
        assert code == 2, err
        line = one_line(err)
        assert line.startswith(f"error: {draft}: the decoder could make a 5-character token 500,000 characters "
                               "long, more than 65,536; VOCABCHECK_MAX_TOKEN_BYTES sets another limit"), line
        assert len(line) < 400


def test_row2_a_decoder_that_grows_the_whole_vocabulary_past_its_budget_is_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("VOCABCHECK_MAX_DECODED_BYTES", "100000")
    grow = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                              "content": "X" * 1000}, {"type": "Fuse"}]}
    target, draft = pair(tmp_path, tokens=LETTERS + [f"\u2581{n:04d}" for n in range(200)], decoder=grow)
    code, _, err = cli("compare", draft, target, "--no-probe")
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"error: {draft}: the decoder makes the vocabulary's tokens more than 100,000 bytes "
                           "together"), line
    assert "VOCABCHECK_MAX_DECODED_BYTES" in line


def test_row3_a_decoder_of_10_002_steps_is_read_as_untranslatable_not_once_per_step(cli, tmp_path):
    """A flat Sequence of 10,002 Replace steps over 20,000 tokens: one pass per step was 200 million token
    replacements; past the step cap the decoder is not read at all, and the reason says so."""
    steps = [{"type": "Replace", "pattern": {"String": chr(0x4E00 + n)}, "content": "y"} for n in range(10_000)]
    many = {"type": "Sequence", "decoders": steps + [{"type": "Fuse"}, {"type": "Fuse"}]}
    target, draft = pair(tmp_path, tokens=LETTERS + [f"t{n:05d}" for n in range(20_000)], decoder=many)
    document = compare_json(cli, target, draft)
    translation = document["translation"]
    assert not translation["translatable"]
    assert translation["reason"] == ("the draft's tokenizer is not translatable: a decoder of more than 32 steps that "
                                     "act on each token, more than vocabcheck reads (VOCABCHECK_MAX_DECODER_STEPS "
                                     "sets another limit)")


# --- row 4: a normalizer that inflates every text -------------------------------------------------------------------


@pytest.mark.parametrize("in_worker", [False, True])
def test_row4_a_normalizer_prepending_100_000_characters_is_refused_after_one_short_text(cli, tmp_path, monkeypatch,
                                                                                          in_worker):
    """Prepend of 50,000 characters (under the normalizer's growth cap; the issue's 1 M is over it): every probe text
    would encode to 50,000 tokens or more; the first (shortest) text that does is one line, in this process or in the
    compare worker (which then stops)."""
    from vocabcheck import probe

    if in_worker:
        monkeypatch.setattr(probe, "WORKER_MIN_CHARS", 0)
    prepend = {"type": "Prepend", "prepend": "a" * 50_000}
    target, draft = pair(tmp_path, normalizer=prepend)
    code, _, err = cli("compare", target, draft)
    assert code == 2, err
    line = one_line(err)
    assert line.startswith(f"error: {draft}: the tokenizer encodes a 1-character probe text ' ' to 50,001 tokens, "
                           "more than the 272 the probe allows"), line


# --- row 12: the compare worker dies with compare, and has a deadline ---------------------------------------------

STAND_IN_PARENT = """
import sys
from vocabcheck import probe
probe._WORKER = probe._DIES_WITH_PARENT + "import signal\\nsignal.pause()\\n"
job = probe._CorpusJob("{}")
print(job._process.pid, flush=True)
print(job.result(), flush=True)
"""


def stand_in_parent(env: dict):
    """A Python process that starts a compare worker running the worker's real start-up and then blocking forever
    (a stand-in for a long encoding); it prints the worker's pid, then what ``result()`` returns."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", STAND_IN_PARENT], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1], env={**os.environ, **env})


def test_row12_the_compare_worker_dies_when_compare_is_killed(tmp_path):
    import select
    import signal

    parent = stand_in_parent({})
    worker = int(parent.stdout.readline())
    watch = os.pidfd_open(worker)  # readable when the worker ends
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        ended, _, _ = select.select([watch], [], [], 120)
        assert ended, "the worker outlived its parent by two minutes"
    finally:
        os.close(watch)
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_row12_a_compare_worker_past_its_deadline_is_stopped_and_not_used():
    parent = stand_in_parent({"VOCABCHECK_PROBE_WORKER_TIMEOUT": "1"})
    worker = int(parent.stdout.readline())
    assert parent.stdout.readline() == "None\n"  # no encodings: compare builds the tokenizer itself
    assert parent.wait(timeout=120) == 0
    assert not os.path.exists(f"/proc/{worker}") or "zombie" in Path(f"/proc/{worker}/status").read_text().lower()


# --- row 8: a GGUF vocabulary past the entry cap ------------------------------------------------------------------


def gguf_with_tokens(path: Path, tokens: list[bytes]) -> Path:
    """A GGUF v3 header of no tensors whose only metadata is the token array (raw bytes, as written)."""
    import struct

    key = b"tokenizer.ggml.tokens"
    body = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, len(tokens))
    body += b"".join(struct.pack("<Q", len(t)) + t for t in tokens)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body)
    return path


def test_row8_a_gguf_token_array_past_the_entry_cap_is_refused_from_its_count(cli, tmp_path, monkeypatch):
    """1,001 tokens against a cap of 1,000 (the real case: 10 million tokens against 3 million): refused from the
    array's count, before any string is read. The token past the cap is not UTF-8, so reading the strings first
    would give another error."""
    monkeypatch.setenv("VOCABCHECK_MAX_TOKENIZER_ENTRIES", "1000")
    path = gguf_with_tokens(tmp_path / "many.gguf", [b"t%d" % n for n in range(1000)] + [b"\xff"])
    for argv in (["inspect", path], ["compare", path, path, "--no-probe"]):
        code, _, err = cli(*argv)
        assert code == 2, err
        line = one_line(err)
        assert line.startswith(f"error: {path}: GGUF tokenizer.ggml.tokens holds 1,001 elements, more than the "
                               "1,000 tokenizer entries vocabcheck reads"), line
        assert "VOCABCHECK_MAX_TOKENIZER_ENTRIES raises it" in line


# --- row 10: gate and matrix memory grows with the models, not the pairs -------------------------------------------


def test_row10_a_gate_over_many_pairs_of_two_models_keeps_no_per_pair_tables(tmp_path):
    """The same two 20,000-token tokenizers (the same tokens at other ids, so every pair is translated) listed 2 and
    12 times: the ten more pairs retain a few kilobytes each (their findings), not their translation tables."""
    import tracemalloc

    from vocabcheck.gate import gate

    target = tiny_tokenizer(tmp_path / "target.json", LETTERS + [f"t{n:05d}" for n in range(20_000)])
    draft = tiny_tokenizer(tmp_path / "draft.json", LETTERS + [f"t{n:05d}" for n in reversed(range(20_000))])
    for path in (target, draft):  # an added token both have: the pair's id map is its own, not the intersection's
        document = json.loads(path.read_text())
        document["added_tokens"] = [{"id": 20_028, "content": "<eos>", "special": True}]
        path.write_text(json.dumps(document))

    def retained(pairs: int) -> tuple[int, object]:
        manifest = tmp_path / f"gate-{pairs}.toml"
        manifest.write_text("".join(f'[[pair]]\nname = "p{n}"\ntarget = "{target}"\ndraft = "{draft}"\n'
                                    'expect = "incompatible"\n' for n in range(pairs)))
        tracemalloc.start()
        try:
            report = gate(manifest, probe=False)
            return tracemalloc.get_traced_memory()[0], report
        finally:
            tracemalloc.stop()

    retained(2)  # profiles and the tokenizer-level diff are cached for the process: both runs below reuse them
    few, _ = retained(2)
    many, report = retained(12)
    assert report.exit_code == 0 and len(report.results) == 12
    per_pair = (many - few) / 10
    assert per_pair < 100_000, f"{per_pair:,.0f} bytes retained per pair"


# --- rows 2-4: growth that compounds over steps is refused before the tokenizers library runs it (found by fuzzing)


@pytest.mark.parametrize("component, steps, words", [
    ("decoder", [{"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 1000}] * 10,
     ["the decoder could make a", "about 10^30 characters long", "VOCABCHECK_MAX_TOKEN_BYTES"]),
    ("decoder", [{"type": "BPEDecoder", "suffix": ""}] * 200,
     ["the decoder could make a", "more than 65,536"]),
    ("normalizer", [{"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 1000}] * 10,
     ["the normalizer could make a 128-character text", "VOCABCHECK_MAX_NORMALIZED_CHARS"]),
])
def test_row2_steps_whose_growth_compounds_are_refused_from_the_steps_alone(cli, tmp_path, component, steps, words):
    """Ten Replace steps of 'a' by 1,000 'a's (a 100 KB file) would make the library build 10³⁰ characters when it
    decodes (or normalizes) the probe's first text: refused from the steps, in every command."""
    key = "decoders" if component == "decoder" else "normalizers"
    target, draft = pair(tmp_path, **{component: {"type": "Sequence", key: steps}})
    for argv in (["inspect", draft], ["compare", target, draft], ["compare", draft, target, "--no-probe"]):
        code, _, err = cli(*argv)
        assert code == 2, (argv, err)
        line = one_line(err)
        assert line.startswith(f"error: {draft}: "), line
        for word in words:
            assert word in line, line
