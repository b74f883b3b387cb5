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
