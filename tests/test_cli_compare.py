"""The CLI of compare and inspect: exit codes, JSON documents that validate, one-line errors naming the file."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import jsonschema
import pytest

from vocabcheck.render.data import schema


def test_compare_padded_pair_exits_0_and_json_validates(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("compare", str(target), str(draft), "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("compare-1"))
    assert document["schema"] == "vocabcheck.compare/1"
    assert document["verdict"] == "padded-compatible"
    assert document["alignment"]["target_rows"] == 152064
    assert document["alignment"]["draft_rows"] == 151936
    assert document["first_divergent_id"] is None
    assert {f["code"] for f in document["findings"]} >= {"rows.padded", "engine.vocab-size"}


def test_compare_terminal_report_shows_verdict_first(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, _ = cli("compare", str(target), str(draft))
    assert code == 0
    assert out.index("PADDED-COMPATIBLE") < out.index("rows.padded") < out.index("lm_head rows")
    assert "152,064" in out and "151,936" in out


def test_compare_incompatible_exits_1(cli, qwen25_json, mistral_json, tmp_path):
    md = tmp_path / "report.md"
    code, out, _ = cli("compare", str(qwen25_json), str(mistral_json("v1")), "--markdown", str(md))
    assert code == 1
    assert "INCOMPATIBLE" in out
    text = md.read_text()
    assert "**incompatible**" in text and "`vocab.conflict`" in text


def test_strict_makes_warnings_fail(cli, qwen25_json, tmp_path):
    document = json.loads(qwen25_json.read_text(encoding="utf-8"))
    document["normalizer"] = None
    other = tmp_path / "no-nfc.json"
    other.write_text(json.dumps(document))
    assert cli("compare", str(qwen25_json), str(other))[0] == 0
    code, out, _ = cli("compare", str(qwen25_json), str(other), "--strict", "--json")
    assert code == 1
    assert json.loads(out)["exit_code"] == 1


def test_inspect_json_validates(cli, qwen_pair):
    code, out, err = cli("inspect", str(qwen_pair[0]), "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("inspect-1"))
    assert document["tokenizer"]["regular_tokens"] == 151643
    assert len(document["added_tokens"]) == 22
    assert document["embeddings"]["output_rows"] == 152064


def test_inspect_terminal(cli, qwen_pair):
    code, out, _ = cli("inspect", str(qwen_pair[1]))
    assert code == 0
    assert "tied to the input embedding" in out and "<|im_end|>" in out


def _bad_inputs(tmp_path, qwen25_json, qwen_pair):
    """(path, words the one-line error must contain)."""
    cases = []
    cases.append((tmp_path / "missing", ["no such file or directory"]))
    empty_dir = tmp_path / "empty-dir"
    empty_dir.mkdir()
    cases.append((empty_dir, ["no tokenizer here"]))
    bad_json = tmp_path / "tokenizer.json"
    bad_json.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []')
    cases.append((bad_json, ["not valid JSON"]))
    no_model = tmp_path / "no-model.json"
    no_model.write_text('{"version": "1.0"}')
    cases.append((no_model, ["no 'model' object"]))
    bad_ids = tmp_path / "bad-ids.json"
    bad_ids.write_text('{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}')
    cases.append((bad_ids, ["non-negative integers"]))
    bad_pipe = tmp_path / "bad-pipeline.json"
    bad_pipe.write_text('{"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}, '
                        '"normalizer": {"type": "NoSuchNormalizer"}}')
    cases.append((bad_pipe, ["normalizer"]))
    unknown = tmp_path / "weights.xyz"
    unknown.write_text("x")
    cases.append((unknown, ["unknown file type"]))

    def model_copy(name):
        directory = tmp_path / name
        shutil.copytree(qwen_pair[1], directory)
        return directory

    truncated = model_copy("truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[:1000])
    cases.append((truncated, ["model.safetensors", "safetensors header claims"]))
    huge = model_copy("huge-header")
    (huge / "model.safetensors").write_bytes(struct.pack("<Q", 2**60) + b"{}")
    cases.append((huge, ["model.safetensors", "1,152,921,504,606,846,976"]))
    short = model_copy("short")
    (short / "model.safetensors").write_bytes(b"abc")
    cases.append((short, ["model.safetensors", "shorter than its 8-byte header"]))
    lying = model_copy("lying-offsets")
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [151936, 32],
                                                       "data_offsets": [0, 2**40]}}).encode()
    (lying / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)
    cases.append((lying, ["model.safetensors", "outside the file"]))
    escape = model_copy("index-escape")
    (escape / "model.safetensors").unlink()
    (escape / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight":
                                                                                   "../../etc/passwd"}}))
    cases.append((escape, ["model.safetensors.index.json", "points outside the model directory"]))
    bad_config = model_copy("bad-config")
    (bad_config / "config.json").write_text("{not json")
    cases.append((bad_config, ["config.json", "not valid JSON"]))
    array_config = model_copy("array-config")
    (array_config / "config.json").write_text("[1, 2]")
    cases.append((array_config, ["config.json", "JSON object"]))
    return cases


def test_bad_inputs_exit_2_with_one_line_naming_the_file(cli, tmp_path, qwen25_json, qwen_pair):
    for path, words in _bad_inputs(tmp_path, qwen25_json, qwen_pair):
        code, out, err = cli("compare", str(path), str(qwen25_json))
        assert code == 2, (path, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (path, err)
        assert lines[0].startswith("error: ")
        assert str(path.name) in lines[0] or str(path) in lines[0], (path, lines[0])
        for word in words:
            assert word in lines[0], (path, lines[0])
        assert "Traceback" not in err


def test_debug_shows_the_traceback(cli, tmp_path, qwen25_json):
    code, _, err = cli("--debug", "compare", str(tmp_path / "missing"), str(qwen25_json))
    assert code == 2
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("error: ")


def test_usage_errors_exit_2(cli):
    assert cli("compare")[0] == 2
    assert cli("no-such-command")[0] == 2


def test_python_dash_m_and_version():
    result = subprocess.run([sys.executable, "-m", "vocabcheck", "--version"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0 and result.stdout.startswith("vocabcheck ")


@pytest.mark.parametrize("flag", ["--json-file", "--markdown"])
def test_report_files_are_not_written_on_bad_input(cli, tmp_path, qwen25_json, flag):
    out = tmp_path / "out"
    code, _, _ = cli("compare", str(tmp_path / "missing"), str(qwen25_json), flag, str(out))
    assert code == 2 and not out.exists()


def test_token_strings_that_look_like_markup_print_verbatim(cli, mistral_json, qwen25_json):
    """Mistral's control tokens are '[INST]' and '[/INST]': the terminal report must show them, not read them as
    style tags (a closing tag with no opening one made rich raise)."""
    code, out, err = cli("inspect", str(mistral_json("v3")))
    assert code == 0, err
    assert "'[/INST]'" in out and "'[INST]'" in out
    code, out, err = cli("compare", str(mistral_json("v3")), str(mistral_json("v1")))
    assert code == 1, err
    assert "'[INST]'" in out
