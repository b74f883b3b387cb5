"""`bench --served PREDICT_JSON`: the table predict serves a pair with, measured against every fixed k and plain
decoding at each batch size. On vocabcheck's decoder the served k at a batch size is that fixed-k cell (added to
the bench's k list where missing); vLLM's side (one engine with the whole table) is in tests/test_vllm.py."""

from __future__ import annotations

import json

import jsonschema
import pytest

from vocabcheck.engines import vllm
from vocabcheck.methods import Method
from vocabcheck.predict import serving
from vocabcheck.predict.serving import ServePlan, ServeRow
from vocabcheck.render import predict_report
from vocabcheck.render.data import schema
from tests.test_predict_serving import table_predictions

PROMPTS = ("def fibonacci(n):\n", "def parse(text):\n", "class Stack:\n")


def predict_json(path, plans) -> None:
    """predict's own JSON (its writer, schema predict-1) holding these serving tables."""
    serve = tuple(serving.ServeConfig(plan, vllm.plan_config(plan)) for plan in plans)
    document = predict_report.predict_document(table_predictions(), serve, command="vocabcheck predict t d --json")
    jsonschema.validate(document, schema("predict-1"))
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


def test_the_served_k_is_measured_beside_every_fixed_k_and_set_against_the_best(cli, qwen_pair, tmp_path,
                                                                               prompt_file):
    """A draft table serving k=3 at batch 1 and nothing from batch 2, n-gram serving 2 everywhere: bench measures
    k=3 and k=2 though -k names only 1, and each served row is its fixed-k cell's speedup (1.0 where it serves
    none), beside the best of every fixed k and plain decoding at that batch size, with predict's figure."""
    target, draft = qwen_pair
    served = tmp_path / "predict.json"
    # the draft as predict was given it, spelled otherwise than bench's: the same directory
    predict_json(served, [ServePlan(f"{draft}/.", Method.DRAFT, (ServeRow(1, 3, 1.4), ServeRow(2, 0, 1.0)),
                                    same_rows=False),
                          ServePlan("ngram", Method.NGRAM, (ServeRow(1, 2, 1.3), ServeRow(2, 2, 1.1)))])
    report = tmp_path / "report"
    code, out, err = cli("bench", target, draft, "--methods", "none,ngram,draft", "-k", "1", "--batch-sizes", "1,2",
                         "--max-new-tokens", 4, "--warmup", 0, "--repeat", 1, "--prompts", prompt_file,
                         "--served", served, "--device", "cpu", "--json", "--report", report)
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("bench-1"))
    assert document["plan"]["ks"] == [1, 2, 3]
    assert [t["schedule"] for t in document["plan"]["served"]] == [[[1, 1, 3], [2, 2, 0]], [[1, 2, 2]]]
    speedups = {(r["method"], r["batch_size"], r["k"]): r["speedup"] for r in document["rows"] if r["k"] != 0}
    rows = {(r["method"], r["batch_size"]): r for r in document["served"]}
    assert set(rows) == {(m, b) for m in ("draft", "ngram") for b in (1, 2)}
    assert {r["engine"] for r in rows.values()} == {"vocabcheck"}
    assert [rows["draft", 1]["k"], rows["draft", 2]["k"], rows["ngram", 1]["k"], rows["ngram", 2]["k"]] == [3, 0, 2, 2]
    assert rows["draft", 2]["speedup"] == 1.0  # no speculation served: plain decoding itself
    for (method, batch), row in rows.items():
        fixed = {k: speedups[method, batch, k] for k in (1, 2, 3)}
        if row["k"]:
            assert row["speedup"] == fixed[row["k"]]
        best = max(fixed, key=fixed.get)
        assert (row["best_k"], row["best_speedup"]) == ((best, fixed[best]) if fixed[best] > 1.0 else (0, 1.0))
        assert row["of_best"] == pytest.approx(row["speedup"] / row["best_speedup"])
    assert rows["draft", 1]["predicted_speedup"] == 1.4 and rows["ngram", 2]["predicted_speedup"] == 1.1
    markdown = (report / "bench.md").read_text(encoding="utf-8")
    assert "## The served table" in markdown
    assert "| vocabcheck | draft | 2 | 0 | 1.00x | 1.00x |" in markdown


def test_a_served_file_that_is_not_a_usable_predict_json_is_one_line_and_nothing_runs(cli, qwen_pair, tmp_path):
    target, draft = qwen_pair
    only_ngram = tmp_path / "ngram.json"
    predict_json(only_ngram, [ServePlan("ngram", Method.NGRAM, (ServeRow(1, 2, 1.3),))])
    other_draft = tmp_path / "other-draft.json"  # predict ranked another draft: its table is not this draft's
    predict_json(other_draft, [ServePlan(str(tmp_path), Method.DRAFT, (ServeRow(1, 2, 1.3),)),
                               ServePlan("ngram", Method.NGRAM, (ServeRow(1, 2, 1.3),))])
    none_served = tmp_path / "noisy.json"
    predict_json(none_served, [])
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"schema": "vocabcheck.bench/1", "serve": []}), encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "vocabcheck.predict/1", "serve": [', encoding="utf-8")
    bad_row = tmp_path / "bad-row.json"
    document = json.loads(only_ngram.read_text())
    document["serve"][0]["per_batch_size"][0]["k"] = -1
    bad_row.write_text(json.dumps(document), encoding="utf-8")
    report = tmp_path / "report"
    for path, methods, words in (
            (tmp_path / "missing.json", "none,draft", "not found"),
            (broken, "none,draft", "is not valid JSON"),
            (bench, "none,draft", "is not predict's JSON (schema 'vocabcheck.bench/1'"),
            (only_ngram, "none,draft", f"serves no table for draft {draft} (it has ngram)"),
            (other_draft, "none,ngram,draft", f"serves no table for draft {draft} (it has {tmp_path}, ngram)"),
            (none_served, "none,draft", "serves no table (predict found its costs too noisy"),
            (bad_row, "none,ngram", "has a row that is not a batch size (1 or more) and a k (0-64)"),
            (only_ngram, "ngram", "--served sets each served table against plain decoding: add none")):
        code, out, err = cli("bench", target, draft, "--methods", methods, "--served", path, "--report", report,
                             "--device", "cpu")
        assert code == 2, (path, err)
        assert words in err and len(err.strip().splitlines()) == 1, (path, err)
        if "plain decoding" not in words:
            assert str(path) in err, err
        assert not report.exists() and out == ""


def test_the_served_k_at_any_batch_size_is_the_schedule_s():
    """k_at reads the schedule vLLM is given: a measured size's k from it to the next measured size, the first k
    from batch 1, the last carried on."""
    plan = ServePlan("d", Method.DRAFT, (ServeRow(2, 4, 1.6), ServeRow(4, 2, 1.2), ServeRow(16, 0, 1.0)))
    assert plan.schedule() == ((1, 3, 4), (4, 15, 2), (16, 16, 0))
    assert [plan.k_at(b) for b in (1, 2, 3, 4, 15, 16, 64)] == [4, 4, 4, 2, 2, 0, 0]


def test_a_table_predict_would_not_serve_is_measured_as_no_speculation(tmp_path):
    """A table that does not pay (vLLM: its 0 rows cost more than the rest gain; ``pays`` false and no
    speculative_config) is what predict says to serve without speculation: bench measures it as plain decoding."""
    from vocabcheck.bench.served import read_plans

    losing = ServePlan("d", Method.DRAFT, (ServeRow(1, 2, 1.1), ServeRow(16, 0, 0.6)))
    paying = ServePlan("ngram", Method.NGRAM, (ServeRow(1, 4, 1.9), ServeRow(16, 0, 0.7)))
    path = tmp_path / "predict.json"
    predict_json(path, (losing, paying))
    draft, ngram = read_plans(path, ("none", "draft", "ngram"), draft="d")
    assert [(r.k, r.speedup) for r in draft.rows] == [(0, 1.0), (0, 1.0)] and draft.k_max == 0
    assert [(r.k, r.speedup) for r in ngram.rows] == [(4, 1.9), (0, 0.7)]  # it pays: served as predicted


def test_on_vllm_the_served_engine_is_set_against_each_fixed_k_in_the_repeats_it_ran_beside_it():
    """vLLM's served table, its fixed-k engines and plain decoding's start minutes apart, and a shared machine drifts
    meanwhile: here the served engine's own row ran in a fast minute (4 ms) and would read 2.5x over plain decoding
    and 1.25 of the best. Run beside each cell in the same repeats, it is 1.25x over plain decoding and k=4 is 1.2x
    its speed: the best fixed k is 4, at 1.5x, and the table serves 0.83 of it."""
    from types import SimpleNamespace

    from vocabcheck.bench.served import served_rows
    from vocabcheck.bench.vllm_rows import EngineRow

    def row(method, k, tpot, beside=None, served=False):
        return EngineRow(method=method, batch_size=4, k=k, vllm_tpot_ms=tpot, vocabcheck_tpot_ms=1.0,
                         vllm_tokens_per_s=1.0, vocabcheck_tokens_per_s=1.0, vllm_mean_accepted_length=1.0,
                         vocabcheck_mean_accepted_length=1.0, repeats=1, identical=True, served=served,
                         served_beside=() if beside is None else (("ngram", beside),))

    plan = ServePlan("ngram", Method.NGRAM, (ServeRow(4, 2, 1.3),))
    result = SimpleNamespace(plan=SimpleNamespace(batch_sizes=(4,)), rows=[], row=lambda method, b: None,
                             vllm_rows=[row(Method.NONE, 0, 10.0, beside=8.0), row(Method.NGRAM, 4, 5.0, beside=6.0),
                                        row(Method.NGRAM, 2, 7.0, beside=7.5), row(Method.NGRAM, 2, 4.0, served=True)])
    (served,) = served_rows(result, [plan])
    assert (served.engine, served.k, served.best_k) == ("vLLM", 2, 4)
    assert served.speedup == pytest.approx(1.25) and served.best_speedup == pytest.approx(1.5)
    assert served.of_best == pytest.approx(5.0 / 6.0)
    # where every fixed k is slower than the served engine beside it, the best is plain decoding or the table itself
    slow = SimpleNamespace(**{**vars(result), "vllm_rows": [row(Method.NONE, 0, 10.0, beside=12.0),
                                                            row(Method.NGRAM, 4, 13.0, beside=12.5),
                                                            row(Method.NGRAM, 2, 4.0, served=True)]})
    (served,) = served_rows(slow, [plan])
    assert (served.best_k, served.best_speedup) == (0, pytest.approx(1.0))
    assert served.of_best == pytest.approx(10.0 / 12.0)
