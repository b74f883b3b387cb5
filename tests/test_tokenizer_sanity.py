"""A tokenizer.json that the tokenizers library refuses to build (merges that name tokens the vocabulary lacks,
Unigram scores that are NaN or infinite, numbers JSON does not have) is refused by the profile itself: one line naming
the file, exit code 2, in `inspect` and in `compare` with or without the probe, not only when the probe happens to
build it. What the library accepts, vocabcheck accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vocabcheck.errors import InputError, library_failure, panic_output_dropped


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def assert_refused_everywhere(cli, path: Path, other: Path, *words: str) -> None:
    """inspect, the file against itself (no probe runs: same fingerprint), and against another file without the
    probe: each one line naming the file, exit code 2."""
    for argv in (["inspect", path], ["compare", path, path], ["compare", path, path, "--json"],
                 ["compare", other, path, "--no-probe"], ["compare", path, other, "--no-probe", "--json"]):
        code, out, err = cli(*argv)
        assert code == 2, (argv, out, err)
        line = one_line(err)
        assert str(path) in line, line
        for word in words:
            assert word in line, line


def library_refuses(text: str) -> bool:
    from tokenizers import Tokenizer

    try:
        with panic_output_dropped():
            Tokenizer.from_str(text)
    except BaseException as exc:  # a bare Exception with serde's message, or a Rust panic
        if not library_failure(exc):
            raise
        return True
    return False


# --- BPE merges -------------------------------------------------------------------------------------------------


def qwen_with(qwen25_text: str, tmp_path: Path, name: str, edit) -> Path:
    document = json.loads(qwen25_text)
    edit(document["model"])
    path = tmp_path / name
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


def unknown_part(model: dict) -> None:
    model["merges"][100] = ["Ġthe", "zz-not-a-token"]


def unknown_result(model: dict) -> None:
    del model["vocab"]["Ġthe"]  # the merge that makes it stays


@pytest.mark.parametrize(("name", "edit", "words"), [
    ("unknown-part", unknown_part, ["BPE merge 100 ('Ġthe' 'zz-not-a-token') names 'zz-not-a-token', which is not in "
                                    "the vocabulary"]),
    ("unknown-result", unknown_result, ["BPE merge", "makes 'Ġthe', which is not in the vocabulary"]),
])
def test_merges_the_library_cannot_build_are_refused_without_the_probe(cli, qwen25_text, qwen25_json, tmp_path,
                                                                       name, edit, words):
    path = qwen_with(qwen25_text, tmp_path, f"{name}.json", edit)
    assert library_refuses(path.read_text(encoding="utf-8"))
    assert_refused_everywhere(cli, path, qwen25_json, *words)


def test_the_real_qwen_merges_pass(cli, qwen25_json):
    code, out, err = cli("inspect", qwen25_json, "--json")
    assert code == 0, err
    assert json.loads(out)["tokenizer"]["merges"] == 151_387


# --- small files against the library ---------------------------------------------------------------------------


def tokenizer_text(model: dict, **extra) -> str:
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                       "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
                       "model": model, **extra})


BPE_VOCAB = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "##b": 5, "ba": 6}


def bpe(merges, prefix=None, **model) -> str:
    return tokenizer_text({"type": "BPE", "vocab": BPE_VOCAB, "merges": merges, "continuing_subword_prefix": prefix,
                           **model})


def unigram(score: str) -> str:
    """A Unigram tokenizer whose piece 2 has ``score`` written as it stands in the JSON text."""
    text = tokenizer_text({"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.5], ["b", 7]]})
    return text.replace('["b", 7]', f'["b", {score}]')


# (name, tokenizer.json text, refused?): refused exactly when the tokenizers library refuses to build it
CASES = [
    ("bpe-good-strings", bpe(["a b", "ab c"]), False),
    ("bpe-good-pairs", bpe([["a", "b"], ["ab", "c"], ["b", "a"]]), False),
    ("bpe-unknown-first", bpe(["x b"]), True),
    ("bpe-unknown-second", bpe([["a", "x"]]), True),
    ("bpe-unknown-result", bpe([["c", "a"]]), True),
    ("bpe-two-spaces", bpe(["a  b"]), True),
    ("bpe-leading-space", bpe([" a b"]), True),
    ("bpe-three-parts", bpe(["a b c"]), True),
    ("bpe-prefix-good", bpe(["a ##b"], prefix="##"), False),  # "a" + "##b" minus the prefix: "ab"
    ("bpe-prefix-short", bpe(["a b"], prefix="##"), True),  # the library panics slicing "b" past its end
    ("bpe-prefix-result", bpe(["a ##b"], prefix="#"), True),  # "a" + "#b" is not in the vocabulary
    ("bpe-nan-dropout", bpe(["a b"]).replace('"merges"', '"dropout": NaN, "merges"'), True),
    ("bpe-huge-dropout", bpe(["a b"]).replace('"merges"', '"dropout": 1e400, "merges"'), True),
    ("unigram-good", unigram("-2.25"), False),
    ("unigram-integer", unigram("-3"), False),
    ("unigram-tiny", unigram("1e-400"), False),  # underflows to 0.0: a float, as the library reads it
    ("unigram-nan", unigram("NaN"), True),
    ("unigram-infinity", unigram("Infinity"), True),
    ("unigram-minus-infinity", unigram("-Infinity"), True),
    ("unigram-overflow", unigram("-1e400"), True),
    ("unigram-true", unigram("true"), True),
]


@pytest.mark.parametrize(("name", "text", "refused"), CASES, ids=[c[0] for c in CASES])
def test_refused_exactly_when_the_library_refuses(cli, tmp_path, name, text, refused):
    assert library_refuses(text) is refused  # the table says what the library does
    path = tmp_path / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    if refused:
        assert_refused_everywhere(cli, path, path)
    else:
        code, _, err = cli("inspect", path)
        assert code == 0, err
        code, out, err = cli("compare", path, path, "--json")
        assert code == 0 and json.loads(out)["verdict"] == "identical", err


@pytest.mark.parametrize(("score", "shown"), [("NaN", "NaN is not a JSON number"),
                                              ("-Infinity", "-Infinity is not a JSON number"),
                                              ("1e400", "the number 1e400 is beyond what a 64-bit float holds")])
def test_a_number_json_cannot_hold_is_named(cli, tmp_path, score, shown):
    path = tmp_path / "tokenizer.json"
    path.write_text(unigram(score), encoding="utf-8")
    code, _, err = cli("inspect", path)
    assert code == 2
    assert one_line(err) == (f"error: {path}: tokenizer.json is not valid JSON ({shown}; the tokenizers library "
                             "refuses it)")


def test_a_merge_is_named_by_rank_and_tokens(cli, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(bpe(["a b", "ab c", "c x"]), encoding="utf-8")
    code, _, err = cli("inspect", path)
    assert code == 2
    assert one_line(err) == (f"error: {path}: the tokenizers library cannot load this tokenizer: BPE merge 2 ('c' 'x') "
                             "names 'x', which is not in the vocabulary")


def test_a_non_finite_score_in_a_document_built_in_python_is_refused():
    """profile_tokenizer takes parsed documents too (converters build them): NaN cannot get in that way either."""
    from vocabcheck.tokenizer import profile_tokenizer

    document = json.loads(unigram("-2.25"))
    document["model"]["vocab"][2][1] = float("nan")
    with pytest.raises(InputError, match=r"Unigram piece 2 'b' has the score nan"):
        profile_tokenizer(document, "memory")


def test_config_files_keep_pythons_leniency_where_vocabcheck_does_not_read(cli, qwen_pair, tmp_path):
    """transformers reads config.json with Python's json module, which takes NaN: a NaN in a field vocabcheck does not
    read is transformers' business; in a field it reads, it is a wrong type (a float)."""
    _, draft = qwen_pair
    model = tmp_path / "model"
    model.mkdir()
    for item in draft.iterdir():
        if item.name != "config.json":
            (model / item.name).symlink_to(item.resolve())
    config = (draft / "config.json").read_text()
    (model / "config.json").write_text(config.replace('"initializer_range": 0.02', '"initializer_range": NaN'))
    code, _, err = cli("inspect", model)
    assert code == 0, err
    (model / "config.json").write_text(config.replace('"vocab_size": 151936', '"vocab_size": NaN'))
    code, _, err = cli("inspect", model)
    assert code == 2
    assert one_line(err).endswith("config.json: vocab_size must be an integer, found the number nan")
