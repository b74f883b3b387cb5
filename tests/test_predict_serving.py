"""`predict --batch-sizes`: one prediction per batch size over one load of the models, each exactly what `run`
measures at that batch size, and the serving table they give — the k per batch size (0 where no k is predicted to
pay) and vLLM's ``speculative_config`` for it, whose batch-size schedule vLLM's own parser reads back as the table
(where vLLM is installed)."""

from __future__ import annotations

import importlib.util
import json

import jsonschema
import pytest

from tests.test_predict import K_VALUES, TOKENS, WORDS, assert_same_counts, measured, word_pairs  # noqa: F401
from vocabcheck.decode import DecodeOptions
from vocabcheck.decode.load.loading import Prompt
from vocabcheck.engines import vllm
from vocabcheck.methods import Method
from vocabcheck.predict import serving
from vocabcheck.predict.predictor import PredictRequest, predict_batches
from vocabcheck.predict.result import Candidate, Costs, Counts, KPrediction, Prediction
from vocabcheck.render import predict_report
from vocabcheck.render.data import schema

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_each_batch_size_predicts_what_run_measures_at_it(word_pairs):  # noqa: F811
    """One call for batch sizes 1, 2 and 4: the counts at each are exactly `run`'s at that batch size, for the draft
    and for n-gram lookup."""
    target, draft = word_pairs["pad"]
    prompts = [Prompt(text) for text in WORDS]
    request = PredictRequest(target=str(target), drafts=(str(draft),), k_values=K_VALUES, batch_size=2,
                             batch_sizes=(4, 1), options=DecodeOptions(method="none", max_new_tokens=TOKENS),
                             measure_costs=False)
    units = []
    predictions = predict_batches(request, prompts, progress=units.append)
    assert [p.batch_size for p in predictions] == [2, 1, 4]  # --batch-size's first, then the others in order
    assert len(units) == request.units()
    for prediction in predictions:
        by_method = {c.method: c for c in prediction.candidates}
        size = prediction.batch_size
        assert_same_counts(by_method["draft"], lambda k: measured(target, draft, "draft", prompts, k, size, TOKENS))
        assert_same_counts(by_method["ngram"], lambda k: measured(target, None, "ngram", prompts, k, size, TOKENS))


def candidate(speedups: dict[int, float], *, draft="d", method=Method.DRAFT, noise="", idle: float = 1.0,
              **fields) -> Candidate:
    """A candidate whose greedy k values have the given predicted speedups (and costs carrying ``noise``; where
    ``idle`` is below 1, measured on vLLM, whose speculative engine drafting nothing runs at that speed)."""
    costs = Costs(target_step_s=0.01, draft_step_s=0.001, verify_s=(), noise=noise, spread=1.07)
    if idle != 1.0:
        costs = Costs(target_step_s=0.01, draft_step_s=0.001, verify_s=(), noise=noise, spread=1.07,
                      plain_step_s=0.010, idle_step_s=0.010 / idle, engine="vLLM 0.32.0")
    greedy = tuple(KPrediction(Counts(k=k, steps=10, drafted=10 * k, accepted=5 * k), s) for k, s in speedups.items())
    return Candidate(draft=draft, method=method, greedy=greedy, costs=costs, **fields)


def prediction(batch_size: int, *candidates: Candidate) -> Prediction:
    return Prediction(target="t", candidates=candidates, prompts=4, tokens=80, source="generated",
                      k_values=(1, 2, 4, 8), temperatures=(), batch_size=batch_size, device="cpu", dtype="float32",
                      seconds=1.0)


TABLE = {1: {1: 1.3, 2: 1.6, 4: 1.9, 8: 1.7}, 4: {1: 1.2, 2: 1.4, 4: 1.3, 8: 0.9},
         16: {1: 1.02, 2: 0.9, 4: 0.7, 8: 0.4},
         64: {1: 0.9, 2: 0.7, 4: 0.5, 8: 0.3}}


def table_predictions(**fields) -> list[Prediction]:
    return [prediction(size, candidate(speedups, **fields), candidate({k: 0.5 for k in speedups}, draft="ngram",
                                                                      method=Method.NGRAM))
            for size, speedups in TABLE.items()]


def test_the_table_serves_each_batch_size_its_best_k_and_none_where_speculation_would_not_pay():
    plans = serving.plans(table_predictions())
    draft, ngram = plans
    assert [(r.batch_size, r.k) for r in draft.rows] == [(1, 4), (4, 2), (16, 0), (64, 0)]  # 1.02x: under the margin
    assert [r.speedup for r in draft.rows] == [1.9, 1.4, 1.0, 1.0]
    assert draft.schedule() == ((1, 3, 4), (4, 15, 2), (16, 64, 0))  # the last range carried on by vLLM
    assert vllm.plan_config(draft) == {"model": "d", "method": "draft_model", "num_speculative_tokens": 4,
                                          "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 15, 2], [16, 64, 0]]}
    assert vllm.plan_config(draft, draft_dir="/aligned")["model"] == "/aligned"
    assert [r.k for r in ngram.rows] == [0, 0, 0, 0] and vllm.plan_config(ngram) is None  # never pays: none


def test_on_vllm_a_served_0_costs_what_its_idle_engine_costs_and_a_table_that_loses_overall_is_not_served():
    """vLLM runs a batch size its table gives 0 in the speculative engine, drafting nothing (on vLLM 0.32's CPU build at
    0.82-0.88x of the plain engine at batch 16): that 0 is priced so, a k is served where it beats that, and a table
    whose losses outweigh its gains (geometric mean over the measured batch sizes) is served as no speculative
    config."""
    gains = [prediction(1, candidate({2: 1.6, 4: 1.9}, idle=0.7)), prediction(4, candidate({2: 1.3, 4: 1.2}, idle=0.7)),
             prediction(16, candidate({2: 0.72, 4: 0.6}, idle=0.7))]
    plan, = serving.plans(gains)
    assert [(r.k, r.speedup) for r in plan.rows] == [(4, 1.9), (2, 1.3), (0, pytest.approx(0.7))]  # 0.72: no margin
    assert plan.loses_at == (16,) and plan.pays  # (1.9 * 1.3 * 0.7)^(1/3) = 1.19
    config = vllm.plan_config(plan)
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 15, 2], [16, 16, 0]]
    beats_idle = [prediction(1, candidate({2: 1.6}, idle=0.7)), prediction(16, candidate({1: 0.8, 2: 0.75}, idle=0.7))]
    assert [(r.k, r.speedup) for r in serving.plans(beats_idle)[0].rows] == [(2, 1.6), (1, 0.8)]
    loses = [prediction(1, candidate({2: 1.1}, idle=0.7)), prediction(16, candidate({2: 0.6}, idle=0.7))]
    plan, = serving.plans(loses)
    assert plan.k_max == 2 and plan.loses_at == (16,) and not plan.pays and vllm.plan_config(plan) is None
    # on vocabcheck's decoder a 0 is a plain step: a table that speculates anywhere pays, however little
    small = [prediction(1, candidate({2: 1.04})), prediction(4, candidate({2: 1.0})),
             prediction(16, candidate({2: 0.5}))]
    plan, = serving.plans(small)
    assert [r.k for r in plan.rows] == [2, 0, 0] and plan.loses_at == () and plan.pays
    # every view says where the served table loses, and that a losing table is served without speculation
    serve = (serving.ServeConfig(serving.plans(gains)[0], vllm.plan_config(serving.plans(gains)[0])),)
    markdown = predict_report.predict_markdown(gains, serve, command="x")
    assert "| d | k=4 (1.90×) | k=2 (1.30×) | 0 (0.70×) |" in markdown
    assert "slower than serving without speculation at batch 16 (0.70×)" in " ".join(markdown.split())
    document = predict_report.predict_document(gains, serve, command="x")
    jsonschema.validate(document, schema("predict-1"))
    assert document["serve"][0]["pays"] is True and document["serve"][0]["loses_at"] == [16]
    assert document["drafts"][0]["idle_step_ms"] == pytest.approx(10 / 0.7)
    losing = (serving.ServeConfig(serving.plans(loses)[0], None),)
    assert "does not pay" in " ".join(predict_report.predict_markdown(loses, losing, command="x").split())
    from rich.console import Console
    import io

    log = io.StringIO()
    predict_report.print_prediction(Console(file=log, width=80), gains, serve)
    text = " ".join(log.getvalue().split())
    assert "0 · 0.70×" in text and "serve without a speculative config" in text


def test_the_table_follows_batch_size_whatever_order_the_sizes_were_given_in():
    """`--batch-sizes 4,1,64,16` shows batch 4's tables first; the serving table still runs from batch 1 upwards."""
    given = table_predictions()
    shuffled = [given[1], given[0], given[3], given[2]]
    assert [p.rows for p in serving.plans(shuffled)] == \
        [p.rows for p in serving.plans(given)]
    assert serving.plans(shuffled)[0].schedule() == ((1, 3, 4), (4, 15, 2), (16, 64, 0))


def test_one_k_for_every_batch_size_is_one_number_and_the_table_starts_at_batch_1():
    same = [prediction(size, candidate({2: 1.5, 4: 1.4}, method=Method.NGRAM, draft="ngram")) for size in (2, 8)]
    plan, = serving.plans(same)
    assert plan.schedule() == ((1, 8, 2),)
    assert vllm.plan_config(plan, ngram_min=2, ngram_max=4) == {"method": "ngram", "num_speculative_tokens": 2,
                                                                 "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def test_no_table_from_disturbed_costs_nor_for_a_refused_or_translated_draft():
    noisy = table_predictions()
    noisy[2] = prediction(16, candidate(TABLE[16], noise="other processes used 60% of the CPUs"))
    assert serving.plans(noisy) == ()  # the ranking is noise at one batch size: no confident answer
    refused = [prediction(s, Candidate(draft="d", method=Method.DRAFT, refused="incompatible")) for s in (1, 4)]
    translated = [prediction(s, candidate(TABLE[s], translated=True)) for s in (1, 4)]
    assert serving.plans(refused) == () and serving.plans(translated) == ()


def test_the_serving_table_is_in_every_view(tmp_path):
    predictions = table_predictions(same_rows=False)
    serve = tuple(serving.ServeConfig(plan, vllm.plan_config(plan)) for plan in serving.plans(predictions))
    document = predict_report.predict_document(predictions, serve, command="vocabcheck predict t d")
    jsonschema.validate(document, schema("predict-1"))
    assert [p["batch_size"] for p in document["per_batch_size"]] == [1, 4, 16, 64]
    assert document["serve"][0]["per_batch_size"][:2] == [{"batch_size": 1, "k": 4, "speedup": 1.9, "spread": 1.07},
                                                          {"batch_size": 4, "k": 2, "speedup": 1.4, "spread": 1.07}]
    assert document["serve"][0]["speculative_config"]["num_speculative_tokens"] == 4
    assert document["serve"][1]["speculative_config"] is None and document["serve"][0]["same_rows"] is False
    markdown = predict_report.predict_markdown(predictions, serve, command="x")
    assert "| d | k=4 (1.90×) | k=2 (1.40×) | 0 | 0 |" in markdown
    from rich.console import Console
    import io

    log = io.StringIO()
    predict_report.print_prediction(Console(file=log, width=80), predictions, serve)
    text = log.getvalue()
    line = next(line for line in text.splitlines() if line.startswith("{"))
    assert json.loads(line) == serve[0].config  # the config printed on one line, copyable
    assert "vocabcheck align" in " ".join(text.split())  # vLLM takes the aligned draft: said


def test_predict_batch_sizes_on_the_command_line(word_pairs, cli):  # noqa: F811
    target, draft = word_pairs["pad"]
    code, out, err = cli("predict", target, draft, "--prompt", "w1 w2 w3", "--prompt", "w42 w42", "-k", "1,2",
                         "--max-new-tokens", 8, "--batch-sizes", "1,2", "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("predict-1"))
    assert [p["batch_size"] for p in document["per_batch_size"]] == [1, 2] and document["batch_size"] == 1
    for plan in document["serve"]:  # where the costs were quiet enough to rank
        for row in plan["per_batch_size"]:
            at = next(p for p in document["per_batch_size"] if p["batch_size"] == row["batch_size"])
            chosen = next(c for c in at["drafts"] + [at["ngram"]] if c["method"] == plan["method"])
            best = max(chosen["per_k"], key=lambda p: p["speedup"])
            assert row["k"] == (best["k"] if best["speedup"] >= 1 + serving.MARGIN else 0)
    code, out, err = cli("predict", target, draft, "--prompt", "w1", "--batch-size", 2, "--batch-sizes", "1,4")
    assert code == 2 and err.strip() == "error: give --batch-size or --batch-sizes, not both", err
    code, out, err = cli("predict", target, draft, "--prompt", "w1", "--batch-sizes", "1,0")
    assert code == 2 and "--batch-sizes must be positive" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here; CI runs this in its vllm venv")
def test_vllm_reads_the_schedule_back_as_the_table():
    """vLLM's own parser of ``num_speculative_tokens_per_batch_size`` accepts the schedule, and its batch size → k
    lookup gives every measured batch size the k of its row (and batch sizes between them their predecessor's)."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    draft, _ = serving.plans(table_predictions())
    config = vllm.plan_config(draft)
    lookup = build_dynamic_sd_schedule_lookup(config["num_speculative_tokens_per_batch_size"], 100,
                                              config["num_speculative_tokens"])
    assert [lookup[b] for b in (1, 3, 4, 15, 16, 64, 100)] == [4, 4, 2, 2, 0, 0, 0]
    assert [draft.k_at(b) for b in range(1, 101)] == lookup[1:]  # bench --served's k per batch size is vLLM's
