"""`vocabcheck matrix`: a family's verdict matrix, N profiles and one tokenizer diff per pair of tokenizers, every
cell what `compare` says."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import vocabcheck
from vocabcheck import diff as diff_module
from vocabcheck import matrix as matrix_module
from vocabcheck import profile as profile_module
from vocabcheck.cli import main
from vocabcheck.render import matrix_report
from vocabcheck.render.data import schema
from vocabcheck.verdict import Verdict, judge


def same_comparison(cell, reference) -> None:
    """Everything `compare` reports: verdict, reason, every finding, the alignment."""
    assert (cell.target.spec, cell.draft.spec) == (reference.target.spec, reference.draft.spec)
    assert cell.verdict is reference.verdict, (cell.target.spec, cell.draft.spec)
    assert cell.reason == reference.reason
    assert [(f.code, f.severity, f.message, dict(f.details)) for f in cell.findings] == \
           [(f.code, f.severity, f.message, dict(f.details)) for f in reference.findings]
    assert cell.alignment == reference.alignment
    assert cell.first_divergent_id == reference.first_divergent_id


def reference_comparisons(specs):
    """compare(target, draft) for every ordered pair: judge on fresh profiles, no cache shared between pairs (each
    profile is built once here too, which changes nothing: a profile is a function of the files)."""
    profiles = {spec: vocabcheck.inspect(spec) for spec in specs}
    return {(t, d): judge(profiles[t], profiles[d]) for t in specs for d in specs}


@pytest.fixture(scope="module")
def family(qwen_pair, models, qwen3_json, mistral_json):
    """Three Qwen2.5-shaped checkpoints (152,064 rows untied, 151,936 tied, and 151,000 rows: fewer than the
    tokenizer's ids, broken), the Qwen3.6 tokenizer and Mistral's v1 SentencePiece tokenizer, as given in mixed
    order; built into a matrix while counting profiles and vocab matches."""
    from vocabcheck.demo import qwen

    broken = models.model("too-few-rows", rows=151000)  # the same fixture test_compare_synthetic uses
    specs = [str(qwen_pair[0]), str(qwen3_json), str(qwen_pair[1]), str(mistral_json("v1")), str(broken)]
    assert qwen.ROWS_LARGE == 152064
    opened, built, matched = [], [], []
    with pytest.MonkeyPatch.context() as patch:
        # matrix profiles each model through profile.profile_of, which opens the source and builds its profile
        real_open, real_build, real_match = (profile_module.open_model, profile_module.build_profile,
                                             diff_module.match_vocab)
        patch.setattr(profile_module, "open_model", lambda spec: opened.append(spec) or real_open(spec))
        patch.setattr(profile_module, "build_profile", lambda source: built.append(source.spec) or real_build(source))
        patch.setattr(diff_module, "match_vocab", lambda t, d: matched.append(1) or real_match(t, d))
        result = matrix_module.build_matrix(specs)
    return {"specs": specs, "matrix": result, "opened": opened, "built": built, "matched": len(matched)}


def test_family_is_grouped_by_tokenizer(family):
    m = family["matrix"]
    q7b, q3, q05b, mistral, broken = family["specs"]
    assert [p.spec for p in m.models] == [q7b, q05b, broken, q3, mistral]  # grouped, as given within a group
    assert [(g.id, [m.models[i].spec for i in g.members]) for g in m.groups] == [
        ("A", [q7b, q05b, broken]), ("B", [q3]), ("C", [mistral])]
    assert m.names == ("qwen-target-152064", "qwen-draft-151936", "too-few-rows", "qwen3.6-tokenizer.json",
                       "mistral-v1.json")
    assert m.errors == () and m.exit_code == 0


def test_each_model_is_profiled_once_and_each_pair_of_tokenizers_diffed_once(family):
    assert sorted(family["opened"]) == sorted(family["specs"])
    assert sorted(family["built"]) == sorted(family["specs"])
    # 5 models, 3 tokenizers: 9 vocab matches (one per ordered pair of tokenizers), not 25
    assert family["matched"] == 9
    assert family["matrix"].tokenizer_diffs == 9


def test_every_cell_is_what_compare_says(family):
    m = family["matrix"]
    reference = reference_comparisons(family["specs"])
    for row in m.cells:
        for cell in row:
            same_comparison(cell, reference[(cell.target.spec, cell.draft.spec)])
    # and literally through vocabcheck.compare for two of them
    q7b, _, q05b, mistral, _ = family["specs"]
    same_comparison(m.cells[0][1], vocabcheck.compare(q7b, q05b))
    same_comparison(m.cells[4][0], vocabcheck.compare(mistral, q7b))


def test_the_verdicts_of_the_family(family):
    m = family["matrix"]
    symbols = [[matrix_report.cell_symbol(c) for c in row] for row in m.cells]
    assert symbols == [
        ["=", "pad", "✗", "✗", "✗"],  # 152,064 rows: pads the 151,936-row draft; 151,000 rows is broken
        ["cut", "=", "✗", "✗", "✗"],
        ["✗", "✗", "✗", "✗", "✗"],  # cannot embed its own tokenizer's ids, not even against itself
        ["✗", "✗", "✗", "=", "✗"],  # Qwen3.6 re-ranked the byte-level vocabulary
        ["✗", "✗", "✗", "✗", "="],
    ]
    assert m.cells[0][1].verdict is Verdict.PADDED_COMPATIBLE and m.cells[0][1].alignment.pad_rows == 128
    assert any(f.code == "rows.tokenizer-overflow" for f in m.cells[2][2].findings)
    assert m.verdicts() == {Verdict.IDENTICAL: 4, Verdict.PADDED_COMPATIBLE: 2, Verdict.INCOMPATIBLE: 19}
    pairs = {(gp.target.id, gp.draft.id): gp.verdicts for gp in matrix_module.group_pairs(m)}
    assert pairs[("A", "A")] == {Verdict.IDENTICAL: 2, Verdict.PADDED_COMPATIBLE: 2, Verdict.INCOMPATIBLE: 5}
    assert pairs[("A", "B")] == {Verdict.INCOMPATIBLE: 3}


def test_json_document_validates(family):
    document = matrix_report.matrix_document(family["matrix"])
    jsonschema.validate(document, schema("matrix-1"))
    assert document["schema"] == "vocabcheck.matrix/1"
    assert document["summary"]["profiles"] == 5 and document["summary"]["tokenizer_diffs"] == 9
    assert document["summary"]["verdicts"] == {"identical": 4, "padded-compatible": 2, "incompatible": 19}
    assert len(document["cells"]) == 25
    cell = next(c for c in document["cells"] if (c["target"], c["draft"]) == (0, 1))
    assert cell["verdict"] == "padded-compatible" and cell["alignment"]["mapping"] == "pad"
    assert cell["exit_code"] == 0
    assert [g["models"] for g in document["groups"]] == [[0, 1, 2], [3], [4]]
    assert document["models"][1]["embeddings"]["output_rows"] == 151936 and document["models"][1]["group"] == "A"


def test_tokenizers_are_grouped_by_meaning_not_bytes(tmp_path, mistral_json):
    """A re-serialised copy (pretty-printed, merges as strings) is the same tokenizer; Mistral v3 is another."""
    v1 = mistral_json("v1")
    document = json.loads(v1.read_text(encoding="utf-8"))
    document["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in document["model"]["merges"]]
    copy = tmp_path / "mistral-v1-pretty.json"
    copy.write_text(json.dumps(document, indent=2, ensure_ascii=True), encoding="utf-8")
    specs = [str(v1), str(mistral_json("v3")), str(copy)]
    m = matrix_module.build_matrix(specs)
    assert [[m.models[i].spec for i in g.members] for g in m.groups] == [[str(v1), str(copy)], [specs[1]]]
    assert m.tokenizer_diffs == 4
    reference = reference_comparisons(specs)
    for row in m.cells:
        for cell in row:
            same_comparison(cell, reference[(cell.target.spec, cell.draft.spec)])
    assert m.cells[0][1].verdict is Verdict.IDENTICAL  # equivalent tokenizers, rows unknown on both sides
    assert m.cells[0][2].verdict is Verdict.INCOMPATIBLE  # v3 inserts control tokens at ids 3-770


def _link(directory: Path, name: str, target: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).symlink_to(target.resolve())
    return directory / name


def test_a_directory_of_models_from_the_command_line(capsys, tmp_path, qwen_pair, mistral_json):
    family = tmp_path / "family"
    _link(family, "qwen2.5-7b", qwen_pair[0])
    _link(family, "qwen2.5-0.5b", qwen_pair[1])
    _link(family / "mistral-7b", "tokenizer.json", mistral_json("v1"))
    (family / "README.md").write_text("not a model")
    (family / "notes").mkdir()  # no tokenizer, no config.json: not a model
    (family / ".cache").mkdir()
    assert matrix_module.expand_specs([str(family)]) == [str(family / n) for n in ("mistral-7b", "qwen2.5-0.5b",
                                                                                   "qwen2.5-7b")]
    out_file = tmp_path / "matrix.json"
    code = main(["matrix", str(family), "--json", "--json-file", str(out_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    assert json.loads(out_file.read_text()) == document
    jsonschema.validate(document, schema("matrix-1"))
    assert [m["name"] for m in document["models"]] == ["mistral-7b", "qwen2.5-0.5b", "qwen2.5-7b"]
    verdicts = {(c["target"], c["draft"]): c["verdict"] for c in document["cells"]}
    assert verdicts[(2, 1)] == "padded-compatible" and verdicts[(0, 2)] == "incompatible"


def test_an_unreadable_model_is_reported_and_the_others_still_shown(capsys, tmp_path, qwen_pair):
    missing = tmp_path / "missing-model"
    markdown = tmp_path / "matrix.md"
    code = main(["matrix", str(qwen_pair[0]), str(missing), str(qwen_pair[1]), "--markdown", str(markdown)])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == f"error: {missing}: no such file or directory"
    assert "Verdicts (row: target, column: draft)" in out and "qwen-draft-151936" in out
    assert "2 models, 1 tokenizer: 3 profiles, 1 tokenizer diff, 4 verdicts" in out
    text = markdown.read_text()
    assert "| **1** A | = | pad |" in text and "| **2** A | cut | = |" in text
    assert f"- {missing}: no such file or directory" in text


def test_a_directory_with_no_models_is_one_line(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code = main(["matrix", str(tmp_path / "empty")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip().startswith(f"error: {tmp_path / 'empty'}: neither a model directory nor a directory of models")
