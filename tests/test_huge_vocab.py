"""A tokenizer.json with more entries than vocabcheck can compare in a few GB is refused before it is parsed: one line
naming the file and the limit (exit code 2), counted without materialising the file's contents. The limit is
VOCABCHECK_MAX_TOKENIZER_ENTRIES (default vocabcheck.sources.base.MAX_TOKENIZER_ENTRIES)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from vocabcheck.sources import base

ENV = "VOCABCHECK_MAX_TOKENIZER_ENTRIES"


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def write_vocab(path: Path, tokens: int, *, chunk: int = 1_000_000) -> Path:
    """A BPE tokenizer.json with ``tokens`` vocabulary entries and no merges, written a ``chunk`` (a power of ten) at
    a time: chunk n holds ``"tn_i"`` at id n·chunk + i, for n from 1. It holds ``tokens + 12`` entries: 9 top-level
    members, and the model's type, merges and vocab; it has two commas and brackets more (the empty lists)."""
    digits = len(str(chunk)) - 1
    assert chunk == 10**digits and tokens % chunk == 0
    block = ",".join(f'"t#_{i}":#{i:0{digits}d}' for i in range(chunk))  # "#" becomes the chunk's number
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null, '
                     '"pre_tokenizer": null, "post_processor": null, "decoder": null, '
                     '"model": {"type": "BPE", "merges": [], "vocab": {')
        for number in range(1, tokens // chunk + 1):
            handle.write(("," if number > 1 else "") + block.replace("#", str(number)))
        handle.write("}}}")
    return path


def test_a_vocabulary_over_the_limit_is_refused_in_one_line(cli, monkeypatch, tmp_path):
    path = write_vocab(tmp_path / "tokenizer.json", 5_000, chunk=1_000)
    monkeypatch.setenv(ENV, "5012")  # exactly its entries: accepted
    code, out, err = cli("inspect", path, "--json")
    assert code == 0, err
    assert json.loads(out)["tokenizer"]["regular_tokens"] == 5_000
    monkeypatch.setenv(ENV, "5011")
    for argv in (["inspect", path], ["compare", path, path], ["compare", path, path, "--no-probe", "--json"]):
        code, _, err = cli(*argv)
        assert code == 2, (argv, err)
        assert one_line(err) == (f"error: {path}: tokenizer.json holds more than 5,011 entries (tokens, merges, "
                                 f"ids...; at most 5,014), the limit that keeps a comparison within a few GB of "
                                 f"memory; {ENV} raises it")


def test_commas_and_brackets_inside_strings_are_not_entries(cli, monkeypatch, tmp_path):
    """The first count (commas and brackets anywhere) only bounds the entries; a file over the limit by that count
    is counted exactly before it is refused."""
    document = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                "post_processor": None, "decoder": None,
                "model": {"type": "WordLevel", "unk_token": "[UNK]",
                          "vocab": {"[UNK]": 0, ",,,,": 1, "[[[[": 2, "{{{{": 3, "\\\",[": 4, "a": 5}}}
    text = json.dumps(document, indent=2)
    path = tmp_path / "tokenizer.json"
    path.write_text(text, encoding="utf-8")
    entries = reference_count(document)
    assert entries == 7 + 3 + 6  # the top-level members, the model's, the vocabulary
    assert text.count(",") + text.count("[") + text.count("{") > entries + 10
    monkeypatch.setenv(ENV, str(entries))
    code, _, err = cli("inspect", path)
    assert code == 0, err
    monkeypatch.setenv(ENV, str(entries - 1))
    code, _, err = cli("inspect", path)
    assert code == 2
    assert f"holds more than {entries - 1:,} entries" in one_line(err)


@pytest.mark.parametrize("value", ["many", "0", "-5", "1e6"])
def test_a_limit_that_is_not_a_positive_number_is_one_line(cli, monkeypatch, qwen25_json, value):
    monkeypatch.setenv(ENV, value)
    code, _, err = cli("inspect", qwen25_json)
    assert code == 2
    assert one_line(err) == f"error: {ENV} must be a positive whole number of entries, not {value!r}"


def test_the_real_tokenizers_are_well_within_the_default_limit(qwen25_json, qwen3_json):
    assert base.MAX_TOKENIZER_ENTRIES == 3_000_000
    for path in (qwen25_json, qwen3_json):
        assert base.count_entries(path.read_text(encoding="utf-8")) < base.MAX_TOKENIZER_ENTRIES / 3


MEASURE = """
import json, resource, sys

from vocabcheck.cli import main

scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, in KiB on Linux
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
code = main(["compare", sys.argv[1], sys.argv[1]])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
print(json.dumps({"code": code, "growth": after - before}))
"""


def test_ten_million_tokens_are_refused_by_the_default_limit_without_parsing(tmp_path):
    """The issue's input: 10 million vocabulary entries (a 188 MB file, under the 256 MiB size cap) took 153 s and
    5.7 GB. Refused from a count: the process grows by the file read and its text (twice the file's size), where
    parsing it would take more than a gigabyte of objects besides. Measured in a fresh process (its peak resident
    memory after the imports, then after the command)."""
    path = write_vocab(tmp_path / "tokenizer.json", 10_000_000)
    size = path.stat().st_size
    assert size < base.MAX_TOKENIZER_JSON_BYTES
    env = {k: v for k, v in os.environ.items() if k != ENV}
    result = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, env=env,
                            check=False, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["code"] == 2
    assert result.stderr.strip() == (f"error: {path}: tokenizer.json holds more than 3,000,000 entries (tokens, "
                                     f"merges, ids...; at most 10,000,014), the limit that keeps a comparison within "
                                     f"a few GB of memory; {ENV} raises it")
    assert measured["growth"] < 3 * size, (measured, size)


# --- the count itself -------------------------------------------------------------------------------------------


def reference_count(value) -> int:
    if isinstance(value, dict):
        return len(value) + sum(reference_count(v) for v in value.values())
    if isinstance(value, list):
        return len(value) + sum(reference_count(v) for v in value)
    return 0


AWKWARD = ["", ",", "[", "{", "}", "]", '"', "\\", '\\"', '",', "[]", "{}", "a,b", "\n", " , ", "\u0120,", "😀[",
           "\\\\", '\\\\"']


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice(AWKWARD) + rng.choice(AWKWARD)
    if kind == 1:
        return rng.choice([0, -1, 2.5, 1e-7, True, None])
    if kind == 2:
        return rng.choice([[], {}])
    if kind == 3:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rng.choice(AWKWARD) + str(i): random_value(rng, depth + 1) for i in range(rng.randrange(5))}


def test_the_count_is_exact_for_any_json_text():
    rng = random.Random(16)
    for _ in range(300):
        value = {"root": random_value(rng)}
        for text in (json.dumps(value), json.dumps(value, indent=2), json.dumps(value, ensure_ascii=False),
                     json.dumps(value, separators=(",", ":"))):
            assert base.count_entries(text) == reference_count(value), text


def test_a_hostile_text_is_counted_in_one_pass(cli, monkeypatch, tmp_path):
    """Commas enough to need the exact count, then a string that never ends, made of escaped quotes: each would be a
    place to start matching a string again if the count scanned strings by trial and error."""
    path = tmp_path / "tokenizer.json"
    path.write_text("[" + "," * 100_000 + '"' + '\\"' * 1_000_000, encoding="utf-8")
    monkeypatch.setenv(ENV, "50000")
    code, _, err = cli("inspect", path)
    assert code == 2
    assert "holds more than 50,000 entries" in one_line(err)
    assert base.count_entries(path.read_text(encoding="utf-8")) == 100_001


def test_a_tiktoken_file_with_more_ranks_than_the_limit_is_refused_before_it_is_converted(cli, monkeypatch,
                                                                                          tmp_path):
    """Each rank becomes a vocabulary entry of the tokenizer.json converted from the file: too many ranks are refused
    from a count of its lines, before they are split and converted."""
    import base64

    path = tmp_path / "ranks.tiktoken"
    path.write_bytes(b"\n".join(base64.b64encode(bytes([i % 256, i // 256])) + b" %d" % i for i in range(1_001))
                     + b"\n\n")
    monkeypatch.setenv(ENV, "2000")  # room for the ranks and the rest of the tokenizer.json
    code, out, err = cli("inspect", path, "--json")
    assert code == 0, err
    assert json.loads(out)["tokenizer"]["regular_tokens"] == 1_001
    monkeypatch.setenv(ENV, "1000")
    code, _, err = cli("inspect", path)
    assert code == 2
    assert one_line(err) == (f"error: {path}: tiktoken ranks file holds more than 1,000 ranks, each an entry of its "
                             f"tokenizer.json: over the 1,000-entry limit that keeps a comparison within a few GB of "
                             f"memory; {ENV} raises it")
