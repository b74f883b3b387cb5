"""`vocabcheck gate`: a TOML manifest of pairs with expected verdicts, for CI."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from vocabcheck import gate as gate_module
from vocabcheck import profile as profile_module
from vocabcheck.demo import qwen
from vocabcheck.render.data import schema


def manifest(path: Path, *pairs: dict) -> Path:
    """Write a manifest of [[pair]] tables (values are TOML strings, booleans or lists of strings)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        return json.dumps(str(v))

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("[[pair]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in pair.items()) + "\n"
                            for pair in pairs), encoding="utf-8")
    return path


def link(directory: Path, name: str, target: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).symlink_to(target.resolve())
    return directory / name


@pytest.fixture
def tokenizer_only_models(tmp_path, qwen25_json):
    """Two directories with the Qwen2.5 tokenizer and no checkpoint: an Instruct tokenizer_config (eos <|im_end|>)
    and a base one (eos <|endoftext|>). Same tokenizer, so identical, with a special.eos warning."""
    made = {}
    for name, instruct in (("instruct", True), ("base", False)):
        directory = tmp_path / "tok-models" / name
        link(directory, "tokenizer.json", qwen25_json)
        (directory / "tokenizer_config.json").write_text(json.dumps(qwen.tokenizer_config(instruct=instruct)))
        made[name] = directory
    return made


def junit_cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert suite.get("tests") == root.get("tests") == str(len(cases))
    assert suite.get("failures") == str(sum(len(c.findall("failure")) for c in cases))
    assert suite.get("errors") == str(sum(len(c.findall("error")) for c in cases))
    return {c.get("name"): c for c in cases}


def test_right_expectations_exit_0_and_each_model_is_profiled_once(cli, tmp_path, monkeypatch, qwen_pair,
                                                                   qwen25_json, mistral_json):
    target, draft = qwen_pair
    path = manifest(tmp_path / "gate.toml",
                    {"name": "7B + 0.5B", "target": target, "draft": draft, "expect": "padded-compatible"},
                    {"name": "0.5B + 7B", "target": draft, "draft": target, "min": "padded-compatible"},
                    {"name": "7B itself", "target": target, "draft": target, "expect": "identical"},
                    {"name": "qwen vs mistral", "target": qwen25_json, "draft": mistral_json("v1"),
                     "expect": "incompatible"},
                    {"name": "7B vs mistral", "target": target, "draft": mistral_json("v1"),
                     "expect": "incompatible"})
    calls = []
    # gate profiles each model through profile.profile_of, which opens the source and builds its profile
    real_open, real_build = profile_module.open_model, profile_module.build_profile
    monkeypatch.setattr(profile_module, "open_model", lambda spec: calls.append(spec) or real_open(spec))
    monkeypatch.setattr(profile_module, "build_profile", lambda source: calls.append("build") or real_build(source))
    out_json, out_xml, out_md = tmp_path / "out" / "gate.json", tmp_path / "out" / "junit.xml", tmp_path / "gate.md"
    code, out, err = cli("gate", path, "--json", out_json, "--junit", out_xml, "--markdown", out_md)
    assert code == 0, out + err
    # four distinct models across five pairs: each opened and profiled once
    opened = [c for c in calls if c != "build"]
    assert sorted(opened) == sorted({str(target), str(draft), str(qwen25_json), str(mistral_json("v1"))})
    assert calls.count("build") == 4

    document = json.loads(out_json.read_text())
    jsonschema.validate(document, schema("gate-1"))
    assert document["schema"] == "vocabcheck.gate/1" and document["exit_code"] == 0
    assert document["summary"] | {"seconds": 0} == {"pairs": 5, "passed": 5, "failed": 0, "errors": 0, "models": 4,
                                                    "tokenizer_diffs": 2, "seconds": 0}
    assert [p["verdict"] for p in document["pairs"]] == ["padded-compatible", "padded-compatible", "identical",
                                                        "incompatible", "incompatible"]
    for pair in document["pairs"]:
        jsonschema.validate(pair["comparison"], schema("compare-1"))
    assert document["pairs"][0]["comparison"]["alignment"]["mapping"] == "pad"
    assert document["pairs"][1]["comparison"]["alignment"]["mapping"] == "cut"

    cases = junit_cases(out_xml)
    assert list(cases) == ["7B + 0.5B", "0.5B + 7B", "7B itself", "qwen vs mistral", "7B vs mistral"]
    assert not any(c.findall("failure") or c.findall("error") for c in cases.values())
    assert "rows.padded" in cases["7B + 0.5B"].findtext("system-out")

    markdown = out_md.read_text()
    assert "**5 of 5 pairs as expected**" in markdown
    assert "| 7B + 0.5B | padded-compatible | padded-compatible | ✅ pass |" in markdown
    assert "**incompatible**" in markdown and "`vocab.conflict`" in markdown  # compare's Markdown per pair
    assert "5 of 5 pairs as expected" in out and "7B vs mistral" in out


def test_wrong_expectations_exit_1_with_one_failure_per_unmet_pair(cli, tmp_path, qwen_pair, qwen25_json,
                                                                   mistral_json):
    target, draft = qwen_pair
    path = manifest(tmp_path / "gate.toml",
                    {"name": "right", "target": target, "draft": draft, "expect": "padded-compatible"},
                    {"name": "wrong exact", "target": target, "draft": draft, "expect": "identical"},
                    {"name": "wrong min", "target": target, "draft": draft, "min": "identical"},
                    {"name": "mistral as a draft", "target": qwen25_json, "draft": mistral_json("v1")},
                    {"name": "any verdict", "target": qwen25_json, "draft": mistral_json("v1"),
                     "min": "incompatible"})
    xml = tmp_path / "junit.xml"
    code, out, _ = cli("gate", path, "--junit", xml)
    assert code == 1
    cases = junit_cases(xml)
    assert len(cases) == 5
    failed = {name for name, case in cases.items() if case.findall("failure")}
    assert failed == {"wrong exact", "wrong min", "mistral as a draft"}
    assert all(len(case.findall("failure")) <= 1 for case in cases.values())
    [failure] = cases["wrong exact"].findall("failure")
    assert failure.get("message").startswith("expected identical, got padded-compatible: ")
    assert "rows 152,064 (target) vs 151,936 (draft)" in failure.get("message")
    assert "[info] rows.padded:" in failure.text  # the findings are in the failure text
    [failure] = cases["mistral as a draft"].findall("failure")
    # no expect/min: the pair must be usable, as `compare` exiting 0 means
    assert failure.get("message").startswith("expected ≥ padded-compatible, got incompatible")
    assert "[error] vocab.conflict: " in failure.text and "id 0 is '!' in the target, '<unk>'" in failure.text
    assert "2 of 5 pairs as expected, 3 not" in out


def test_strict_and_allow(cli, tmp_path, tokenizer_only_models):
    instruct, base = tokenizer_only_models["instruct"], tokenizer_only_models["base"]
    path = manifest(tmp_path / "gate.toml",
                    {"name": "lenient", "target": instruct, "draft": base, "expect": "identical"},
                    {"name": "strict", "target": instruct, "draft": base, "expect": "identical", "strict": True},
                    {"name": "strict, eos allowed", "target": instruct, "draft": base, "expect": "identical",
                     "strict": True, "allow": ["special.eos"]},
                    {"name": "strict and wrong", "target": instruct, "draft": base, "expect": "padded-compatible",
                     "strict": True})
    out_json, xml = tmp_path / "gate.json", tmp_path / "junit.xml"
    code, out, _ = cli("gate", path, "--json", out_json, "--junit", xml)
    assert code == 1
    pairs = {p["name"]: p for p in json.loads(out_json.read_text())["pairs"]}
    assert {name: p["result"] for name, p in pairs.items()} == {
        "lenient": "pass", "strict": "fail", "strict, eos allowed": "pass", "strict and wrong": "fail"}
    assert pairs["strict"]["failures"] == ["strict: 1 warning code not allowed: special.eos"]
    assert pairs["strict, eos allowed"]["allow"] == ["special.eos"]
    # two unmet expectations of one pair: one failure element that names both
    [failure] = junit_cases(xml)["strict and wrong"].findall("failure")
    assert failure.get("message") == ("expected padded-compatible, got identical: equivalent tokenizers (embedding "
                                      "rows unknown on both sides); strict: 1 warning code not allowed: special.eos")


def test_relative_paths_resolve_against_the_manifest(cli, tmp_path, monkeypatch, qwen_pair):
    target, draft = qwen_pair
    link(tmp_path / "repo" / "models", "qwen-7b", target)
    link(tmp_path / "repo" / "models", "qwen-0.5b", draft)
    path = manifest(tmp_path / "repo" / "ci" / "gate.toml",
                    {"target": "../models/qwen-7b", "draft": "../models/qwen-0.5b", "expect": "padded-compatible"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out_json = tmp_path / "gate.json"
    code, out, err = cli("gate", path, "--json", out_json)
    assert code == 0, out + err
    [pair] = json.loads(out_json.read_text())["pairs"]
    assert pair["name"] == "../models/qwen-7b ← ../models/qwen-0.5b"  # reports name models as the manifest does
    assert pair["target_resolved"] == str(path.parent / "../models/qwen-7b")
    assert pair["comparison"]["target"]["spec"] == "../models/qwen-7b"
    # a path that is not there is named as resolved against the manifest, not as a hub id
    manifest(path, {"target": "../models/qwen-7b", "draft": "../models/qwen-3b"})
    code, _, err = cli("gate", path)
    assert code == 2
    assert err.strip() == f"error: {path.parent / '../models/qwen-3b'}: no such file or directory"


def test_a_broken_model_does_not_hide_the_other_pairs(cli, tmp_path, qwen_pair, qwen25_json):
    target, draft = qwen_pair
    broken = tmp_path / "broken"
    link(broken, "tokenizer.json", qwen25_json)
    (broken / "model.safetensors").write_bytes(b"abc")
    missing = tmp_path / "missing"
    path = manifest(tmp_path / "gate.toml",
                    {"name": "good", "target": target, "draft": draft, "expect": "padded-compatible"},
                    {"name": "broken draft", "target": target, "draft": broken},
                    {"name": "missing target", "target": missing, "draft": draft},
                    {"name": "broken again", "target": broken, "draft": draft},
                    {"name": "wrong", "target": target, "draft": draft, "expect": "identical"})
    out_json, xml, md = tmp_path / "gate.json", tmp_path / "junit.xml", tmp_path / "gate.md"
    code, out, err = cli("gate", path, "--json", out_json, "--junit", xml, "--markdown", md)
    assert code == 2
    # one line per model that cannot be read, naming the file
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines)
    assert "model.safetensors" in lines[0] and "shorter than its 8-byte header" in lines[0]
    assert lines[1] == f"error: {missing}: no such file or directory"
    assert "Traceback" not in err
    document = json.loads(out_json.read_text())
    jsonschema.validate(document, schema("gate-1"))
    assert document["exit_code"] == 2
    assert [(p["name"], p["result"]) for p in document["pairs"]] == [
        ("good", "pass"), ("broken draft", "error"), ("missing target", "error"), ("broken again", "error"),
        ("wrong", "fail")]
    assert document["pairs"][1]["error"]["type"] == "InputError"
    assert document["pairs"][2]["error"]["type"] == "SourceNotFound"
    cases = junit_cases(xml)
    assert len(cases) == 5
    [error] = cases["missing target"].findall("error")
    assert error.get("message") == f"{missing}: no such file or directory"
    assert cases["wrong"].findall("failure") and not cases["good"].findall("failure")
    assert "💥 error" in md.read_text() and "good" in out and "broken again" in out


def test_github_step_summary_is_appended(cli, tmp_path, monkeypatch, tokenizer_only_models):
    summary = tmp_path / "step_summary.md"
    summary.write_text("# Build\n\nearlier step", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    path = manifest(tmp_path / "gate.toml", {"name": "instruct ← base", "target": tokenizer_only_models["instruct"],
                                             "draft": tokenizer_only_models["base"], "expect": "identical"})
    assert cli("gate", path)[0] == 0
    assert cli("gate", path)[0] == 0
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# Build\n\nearlier step\n## vocabcheck gate: ")
    assert text.count("## vocabcheck gate: ") == 2
    assert text.count("| instruct ← base | identical | identical | ✅ pass |") == 2


def test_reports_are_written_only_after_every_pair_is_evaluated(cli, tmp_path, monkeypatch, qwen_pair):
    target, draft = qwen_pair
    path = manifest(tmp_path / "gate.toml", {"target": target, "draft": draft}, {"target": draft, "draft": target})
    xml = tmp_path / "junit.xml"
    xml.write_text("previous run")
    real_judge, seen = gate_module.judge, []

    def interrupted_on_the_second_pair(*args, **kwargs):
        seen.append(1)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real_judge(*args, **kwargs)

    monkeypatch.setattr(gate_module, "judge", interrupted_on_the_second_pair)
    code, _, _ = cli("gate", path, "--junit", xml, "--json", tmp_path / "gate.json")
    assert code == 130  # interrupted
    assert xml.read_text() == "previous run" and not (tmp_path / "gate.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


MANIFEST_ERRORS = [
    ("bad-toml", '[[pair]]\ntarget = "a"\ndraft = \n', ["not valid TOML", "line 3"]),
    ("missing-target", '[[pair]]\ndraft = "a"\nexpect = "identical"\n', ['pair 1: missing "target"']),
    ("unknown-expect", '[[pair]]\ntarget = "a"\ndraft = "b"\n\n[[pair]]\ntarget = "a"\ndraft = "b"\n'
                       'expect = "compatible"\n',
     ['pair 2: "expect" must be one of identical, padded-compatible, incompatible', "'compatible'"]),
    ("unknown-min", '[[pair]]\ntarget = "a"\ndraft = "b"\nmin = "padded"\n', ['"min" must be one of']),
    ("unknown-code", '[[pair]]\nname = "qwen"\ntarget = "a"\ndraft = "b"\nstrict = true\n'
                     'allow = ["vocab.conflicts"]\n',
     ["pair 1 ('qwen'): unknown finding code 'vocab.conflicts'", "did you mean 'vocab.conflict'?"]),
    ("allow-without-strict", '[[pair]]\ntarget = "a"\ndraft = "b"\nallow = ["special.eos"]\n',
     ['"allow" only matters with strict = true']),
    ("expect-and-min", '[[pair]]\ntarget = "a"\ndraft = "b"\nexpect = "identical"\nmin = "identical"\n',
     ['give "expect" (exactly) or "min" (at least), not both']),
    ("unknown-key", '[[pair]]\ntarget = "a"\ndraft = "b"\nexpected = "identical"\n',
     ["unknown key 'expected'", "did you mean 'expect'?"]),
    ("strict-not-bool", '[[pair]]\ntarget = "a"\ndraft = "b"\nstrict = "yes"\n', ['"strict" must be true or false']),
    ("empty-draft", '[[pair]]\ntarget = "a"\ndraft = ""\n', ['"draft" must be a non-empty string']),
    ("unknown-top-level", 'title = "gate"\n', ["unknown top-level key 'title'"]),
    ("empty", "", ["no [[pair]] tables"]),
    ("single-bracket", '[pair]\ntarget = "a"\ndraft = "b"\n', ["write each pair as [[pair]]"]),
    ("duplicate-names", '[[pair]]\nname = "x"\ntarget = "a"\ndraft = "b"\n\n[[pair]]\nname = "x"\ntarget = "b"\n'
                        'draft = "a"\n', ["pair 2: the name 'x' is already used by pair 1"]),
]


@pytest.mark.parametrize("name,text,words", MANIFEST_ERRORS, ids=[case[0] for case in MANIFEST_ERRORS])
def test_manifest_errors_are_one_line_naming_the_manifest(cli, tmp_path, name, text, words):
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    xml = tmp_path / "junit.xml"
    code, out, err = cli("gate", path, "--junit", xml)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), err
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in err and not xml.exists()


def test_a_manifest_that_is_missing_or_a_directory(cli, tmp_path):
    code, _, err = cli("gate", tmp_path / "nope.toml")
    assert code == 2 and err.strip().startswith(f"error: {tmp_path / 'nope.toml'}: ") and "not found" in err
    code, _, err = cli("gate", tmp_path)
    assert code == 2 and err.strip() == f"error: {tmp_path}: is a directory; expected a TOML gate manifest"


def test_pre_commit_hook_runs_the_gate():
    import yaml

    root = Path(__file__).resolve().parent.parent
    [hook] = yaml.safe_load((root / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "vocabcheck-gate"
    assert hook["entry"].split()[:2] == ["vocabcheck", "gate"]
    assert hook["pass_filenames"] is False and hook["language"] == "python"


def test_junit_is_well_formed_with_control_characters(tmp_path, tokenizer_only_models):
    """Token strings can hold characters XML 1.0 cannot carry; the report must still parse."""
    path = manifest(tmp_path / "gate.toml", {"name": "nul \x01 here", "target": tokenizer_only_models["instruct"],
                                             "draft": tokenizer_only_models["base"]})
    from vocabcheck.render.junit import gate_junit

    report = gate_module.gate(path)
    xml = tmp_path / "junit.xml"
    xml.write_text(gate_junit(report), encoding="utf-8")
    [name] = junit_cases(xml)
    assert name == "nul \\u0001 here"
    assert os.path.getsize(xml) > 0
