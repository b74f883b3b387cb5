"""`predict` tells, without running speculation, what `run` would measure: for greedy decoding the predicted
steps, drafted and accepted proposals per k are exactly the decoder's (a draft with rows padded and cut, a translated
draft, n-gram lookup; alone and in batches; rows that end at eos inside an accepted run); recorded responses give
the same prediction as the target's own sequences; refused pairs say why."""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import jsonschema
import pytest
import torch
from tokenizers import Tokenizer, models as tm, pre_tokenizers
from transformers import AutoModelForCausalLM

from tests.test_translate_decode import small_translated_pair  # noqa: F401  (a fixture: the translated pair)
from vocabcheck.decode import DecodeOptions
from vocabcheck.decode.load.loading import Prompt
from vocabcheck.decode.session import RunRequest, start_session
from vocabcheck.demo.checkpoint import ModelShape, write_model
from vocabcheck.predict.predictor import PredictRequest, predict
from vocabcheck.predict.steps import RowRuns, expected_counts, greedy_counts, position_tables
from vocabcheck.render.data import schema

EOS = 10  # a word the fixture target emits in some of its sequences and not in others
K_VALUES = (1, 4, 8)
TOKENS = 20
WORDS = ["w1 w2 w3 w4", "w5 w9 w100", "w314 w15 w92 w65 w35 w89 w79", "w7", "w200 w201 w202 w203 w204 w205",
         "w42 w42 w42"]


def _word_model(directory, rows: int, seed: int, state=None):
    """A tiny Qwen2 checkpoint over a 480-word tokenizer; ``rows`` output rows (those past the words are padding)."""
    vocab = {f"w{i}": i for i in range(480)}
    tokenizer = Tokenizer(tm.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return write_model(directory, ModelShape(rows=rows, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32,
                                             tied=False, seed=seed),
                       tokenizer_json=tokenizer.to_str(), tokenizer_config={"eos_token": None, "bos_token": None},
                       generation_config={"bos_token_id": None, "eos_token_id": EOS, "pad_token_id": None},
                       state_dict=state)


@pytest.fixture(scope="module")
def word_pairs(tmp_path_factory):
    """One word-level tokenizer; per direction a target and a draft made from it by cutting or zero-padding its
    rows and perturbing every weight: it agrees with the target often, not always."""
    root = tmp_path_factory.mktemp("predict-pairs")
    pairs = {}
    for name, target_rows, draft_rows in (("pad", 512, 500), ("cut", 500, 512)):
        target = _word_model(root / name / "target-random", target_rows, seed=5)
        state = AutoModelForCausalLM.from_pretrained(str(target)).state_dict()
        state["lm_head.weight"][480:] = 0.0  # like a trained model, the target never picks a padding row
        target = _word_model(root / name / "target", target_rows, seed=5, state=state)
        generator = torch.Generator().manual_seed(9)
        draft_state = {}
        for key, value in state.items():
            if key in ("model.embed_tokens.weight", "lm_head.weight"):
                value = value[:draft_rows] if draft_rows <= value.shape[0] else \
                    torch.cat([value, torch.zeros(draft_rows - value.shape[0], value.shape[1])])
            draft_state[key] = value + 0.3 * value.std() * torch.randn(value.shape, generator=generator)
        pairs[name] = target, _word_model(root / name / "draft", draft_rows, seed=6, state=draft_state)
    return pairs


@functools.lru_cache(maxsize=4)
def session_for(target, draft, method: str, translate: bool):
    return start_session(RunRequest(target=str(target), draft=str(draft) if draft else None, methods=(method,),
                                    translate=translate))


def measured(target, draft, method: str, prompts, k: int, batch_size: int, tokens: int, translate=False):
    """What `run` measures: the decoder with this fixed k."""
    options = DecodeOptions(method=method, k=k, max_new_tokens=tokens)
    return session_for(target, draft, method, translate).generate(prompts, options, batch_size=batch_size)


def assert_same_counts(candidate, run_of_k) -> dict:
    """Predicted counts per k equal the measured ones; returns the runs by k."""
    runs = {}
    for predicted in candidate.greedy:
        runs[predicted.k] = run_of_k(predicted.k)
        metrics = runs[predicted.k].metrics
        counts = predicted.counts
        assert (counts.steps, counts.drafted, counts.accepted) == (metrics.steps, metrics.drafted,
                                                                    metrics.accepted), (candidate.draft, predicted.k)
        assert list(counts.acceptance_by_position) == metrics.acceptance_by_position, (candidate.draft, predicted.k)
    return runs


@pytest.mark.parametrize("direction, batch_size", [("pad", 1), ("pad", 4), ("cut", 4)])
def test_greedy_prediction_is_what_run_measures(word_pairs, direction, batch_size):
    target, draft = word_pairs[direction]
    prompts = [Prompt(text) for text in WORDS]
    request = PredictRequest(target=str(target), drafts=(str(draft),), k_values=K_VALUES, batch_size=batch_size,
                             options=DecodeOptions(method="none", max_new_tokens=TOKENS), measure_costs=False,
                             ngram=direction == "pad")
    prediction = predict(request, prompts)
    by_method = {c.method: c for c in prediction.candidates}
    assert not by_method["draft"].refused
    runs = assert_same_counts(by_method["draft"],
                              lambda k: measured(target, draft, "draft", prompts, k, batch_size, TOKENS))
    # the comparison means something: rows end at eos and at the budget, and proposals are accepted and rejected
    assert {s.finish_reason for s in runs[4].sequences} == {"eos", "length"}
    assert 0 < runs[4].metrics.accepted < runs[4].metrics.drafted
    if "ngram" in by_method:
        ngram = assert_same_counts(by_method["ngram"],
                                   lambda k: measured(target, None, "ngram", prompts, k, batch_size, TOKENS))
        assert ngram[8].metrics.accepted > 0


def test_translated_prediction_is_what_run_measures(small_translated_pair):  # noqa: F811
    target, draft = small_translated_pair
    prompts = [Prompt(text) for text in (" the rain in the", " in the then", "the other one", " anthem")]
    request = PredictRequest(target=str(target), drafts=(str(draft),), k_values=(1, 3, 5), ngram=False,
                             batch_size=2, options=DecodeOptions(method="none", max_new_tokens=16),
                             measure_costs=False)
    (candidate,) = predict(request, prompts).candidates
    assert candidate.translated and not candidate.refused
    assert_same_counts(candidate, lambda k: measured(target, draft, "draft", prompts, k, 2, 16, translate=True))
    run = measured(target, draft, "draft", prompts, 3, 2, 16, translate=True)
    assert 0 < run.metrics.accepted < run.metrics.drafted


def test_recorded_responses_predict_what_the_generated_sequences_do(word_pairs, tmp_path, cli):
    """A prompt file whose lines carry the target's responses: no decoding runs, and the prediction is the one the
    target's own sequences give."""
    target, draft = word_pairs["pad"]
    prompts = [Prompt(text) for text in WORDS]
    plain = measured(target, None, "none", prompts, 1, 1, 24)
    file = tmp_path / "traffic.jsonl"
    file.write_text("".join(json.dumps({"prompt": p.text, "response": s.text}) + "\n"
                            for p, s in zip(prompts, plain.sequences)), encoding="utf-8")
    documents = []
    for source in (["--prompt-file", file], [a for text in WORDS for a in ("--prompt", text)]):
        code, out, err = cli("predict", target, draft, *source, "-k", "1,4", "--max-new-tokens", 24, "--json")
        assert code == 0, err
        documents.append(json.loads(out))
    recorded, generated = documents
    jsonschema.validate(recorded, schema("predict-1"))
    assert recorded["source"] == "recorded" and generated["source"] == "generated"
    assert [d["draft"] for d in recorded["drafts"]] == [str(draft)]
    for key in ("drafts", "ngram"):
        assert json.dumps(recorded[key])  # present
    strip = lambda doc: [[(r["k"], r["accepted_tokens"], r["drafted_tokens"], r["steps"]) for r in d["per_k"]]
                         for d in doc["drafts"] + [doc["ngram"]]]
    assert strip(recorded) == strip(generated)
    draft_run = measured(target, draft, "draft", prompts, 4, 1, 24)
    assert recorded["drafts"][0]["per_k"][1]["accepted_tokens"] == draft_run.metrics.accepted


def test_a_refused_draft_is_reported_with_the_compare_reason(word_pairs, small_translated_pair, cli):  # noqa: F811
    target, draft = word_pairs["pad"]
    other = small_translated_pair[0]  # a byte-level tokenizer: the word-level target's cannot be translated
    code, out, err = cli("predict", target, draft, other, "--prompt", "w1 w2", "-k", "2", "--max-new-tokens", 8,
                         "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, schema("predict-1"))
    assert [d["draft"] for d in document["drafts"]] == [str(draft), str(other)]  # refused pairs rank last
    refused = document["drafts"][1]
    assert refused["refused"] and "not translatable" in refused["refused"] and refused["per_k"] == []
    code, out, err = cli("predict", target, other, "--prompt", "w1 w2", "-k", "2", "--max-new-tokens", 8)
    assert code == 1 and "not translatable" in out


@pytest.mark.parametrize("lines, problem", [
    (['{"prompt": "w1 w2"}', '{"text": 3}'], "line 2"),
    (['{"prompt": "w1", "response": "w2"}', '{"prompt": "w3"}'], "response"),
    (['{"prompt": "w1", "response": 7}'], "line 1"),
])
def test_bad_prompt_files_are_one_line_and_exit_code_2(word_pairs, tmp_path, cli, lines, problem):
    target, draft = word_pairs["pad"]
    file = tmp_path / "prompts.jsonl"
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = cli("predict", target, draft, "--prompt-file", file)
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv, problem", [
    (["-k", "two"], "-k"), (["-k", "0"], "-k"), (["--temperature", "-1"], "--temperature"),
    (["--batch-size", "0"], "--batch-size"), (["--prompt-file", "missing.txt"], "not found"),
])
def test_bad_options_are_one_line_and_exit_code_2(word_pairs, cli, argv, problem):
    target, draft = word_pairs["pad"]
    code, out, err = cli("predict", target, draft, *(argv if "--prompt-file" in argv else ["--prompt", "w1"] + argv))
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1


def test_the_step_replay_counts_an_eos_inside_an_accepted_run_as_the_decoder_does():
    """Five tokens, the last one eos, every proposal right: with k = 8 one step emits the four after the first; the
    decoder counts the last emitted token as the target's own, so 3 drafted and 3 accepted."""
    row = RowRuns(length=5, budget=10, matched=(0, 4, 3, 2, 1))
    counts = greedy_counts([row], 8, 1)
    assert (counts.steps, counts.drafted, counts.accepted) == (1, 3, 3)
    counts = greedy_counts([row], 2, 1)  # steps at 1 (2 accepted, then the target's token) and at 4 (cut at eos)
    assert (counts.steps, counts.drafted, counts.accepted) == (2, 2, 2)


def test_expected_acceptance_follows_alpha():
    """α = 1 everywhere: every proposal is accepted, k + 1 tokens per step; α = 0: one token per step."""
    length, k = 41, 4
    sure = expected_counts([position_tables([0.0] + [1.0] * (length - 1), 8)], [length], k)
    assert sure.acceptance_rate == 1.0 and sure.steps == 8 and sure.mean_accepted_length == 1 + 32 / 8
    never = expected_counts([position_tables([0.0] * length, 8)], [length], k)
    assert never.accepted == 0 and never.steps == length - 1


def test_a_disturbed_cost_never_makes_a_useless_draft_pay():
    """Timings a busy machine gave (verification passes cheaper than a plain step, a wider one cheaper than a
    narrower one) are held to what a verification costs: at least a plain step, never less than a narrower one."""
    from vocabcheck.predict.result import Costs

    costs = Costs(target_step_s=0.010, draft_step_s=0.001, verify_s=((2, 0.006), (3, 0.012), (5, 0.011), (9, 0.02)))
    assert [costs.verify_cost(k) for k in (1, 2, 4, 8)] == pytest.approx([1.0, 1.2, 1.2, 2.0])
    for k in (1, 2, 4, 8):
        assert costs.speedup(1.0, k) < 1.0  # nothing accepted: never predicted to pay
        for accepted in (1.5, 2.0, 3.0):
            assert costs.speedup(accepted, k) <= accepted  # never more than the tokens a step yields


def test_the_decoder_s_own_steps_price_k_and_are_held_to_what_a_step_costs():
    """Where the decoder's own steps were timed (the draft's passes and catch-up, the verification and the host's
    work: what the forwards alone left out, over-predicting the draft by 1.11-1.50x) they price the speedup: L over
    the mean step in plain steps, each step priced by the proposals it verified. A disturbed timing (a step cheaper
    than the forwards it runs, or than a narrower step) is held to at least those forwards and never less than the
    narrower step, so a draft that accepts nothing never pays."""
    from vocabcheck.predict.result import Costs

    forwards = Costs(target_step_s=0.010, draft_step_s=0.001, verify_s=((2, 0.011), (3, 0.012), (5, 0.013)))
    steps = Costs(target_step_s=0.010, draft_step_s=0.001, verify_s=((2, 0.011), (3, 0.012), (5, 0.013)),
                  plain_step_s=0.010, step_s=((1, 0.016), (2, 0.009), (4, 0.030)))
    assert [steps.width_cost(w) for w in (1, 2, 3, 4, 8)] == pytest.approx([1.6, 1.6, 2.3, 3.0, 3.0])
    assert steps.width_cost(2) >= steps.forwards_cost(2)
    assert forwards.step_cost(1) is None  # not timed: the forwards price it
    assert steps.speedup(2.4, 1) == pytest.approx(2.4 / 1.6)
    assert forwards.speedup(2.4, 3) == pytest.approx(2.4 / (3 * 0.1 + 1.2))
    # a run's steps by width (its last steps propose only what is left): their mean price
    assert steps.step_cost(4, ((4, 3), (1, 1))) == pytest.approx((3 * 3.0 + 1.6) / 4)
    disturbed = Costs(target_step_s=0.010, draft_step_s=0.001, verify_s=(), plain_step_s=0.010, step_s=((1, 0.007),))
    assert disturbed.step_cost(1) == pytest.approx(1.1)  # a plain step and a draft forward at least
    assert disturbed.speedup(1.0, 1) < 1.0  # nothing accepted: never predicted to pay
    for k in (1, 2, 4):
        for accepted in (1.0, 1.5, 3.0):
            assert steps.speedup(accepted, k) <= accepted
    # n-gram lookup verifies only what it found, often fewer than k: a run whose steps mostly found nothing costs
    # what its own steps without proposals cost (a little more than plain decoding's: the lookup, the bookkeeping),
    # not a verification over k + 1 tokens; and a step is held to a plain step
    lookup = Costs(target_step_s=0.010, draft_step_s=0.0, verify_s=((9, 0.019),), full_width=False,
                   plain_step_s=0.010, step_s=((0, 0.0105), (4, 0.014), (8, 0.013)))
    assert lookup.step_cost(8, ((0, 6), (4, 2), (8, 2))) == pytest.approx((6 * 1.05 + 2 * 1.4 + 2 * 1.4) / 10)
    assert Costs(0.010, 0.0, (), full_width=False, plain_step_s=0.010, step_s=((2, 0.008),)).step_cost(2) == 1.0


def test_a_greedy_replay_counts_its_steps_by_the_width_they_verify():
    """The widths a prediction prices its steps by: a draft model verifies k every step but the last ones (only what
    is left to generate), n-gram lookup what its lookup found: on vocabcheck's decoder the most any row of the batch
    found (every row is padded to it), on vLLM (ragged) the rows' mean, as its timed steps are keyed."""
    from vocabcheck.predict.steps import RowRuns, greedy_counts

    draft = RowRuns(length=10, budget=10, matched=(0,) * 10)  # nothing accepted: one token a step, 9 after prefill
    assert dict(greedy_counts([draft], 4, 1).widths) == {4: 5, 3: 1, 2: 1, 1: 1, 0: 1}  # the last token: plain
    lookup = [RowRuns(length=6, budget=6, matched=(0,) * 6, available=(0, 0, 2, 0, 1, 0)),
              RowRuns(length=6, budget=6, matched=(0,) * 6, available=(0, 3, 0, 0, 0, 0))]
    assert dict(greedy_counts(lookup, 4, 2).widths) == {3: 2, 2: 2, 0: 4, 1: 2}  # a step once per row it ran for
    assert sum(dict(greedy_counts(lookup, 4, 1).widths).values()) == greedy_counts(lookup, 4, 1).steps
    # vLLM verifies 3 + 0 proposals at the first step, not 3 + 3: a mean of 1.5 rows' worth (rounded as the engine's
    # steps are, half to even), then 2 + 0, 0 + 0, 1 + 0 and the plain last step; the counts themselves are the same
    ragged = greedy_counts(lookup, 4, 2, ragged=True)
    assert dict(ragged.widths) == {2: 2, 1: 2, 0: 6}
    assert replace(ragged, widths=()) == replace(greedy_counts(lookup, 4, 2), widths=())
    assert dict(greedy_counts([draft], 4, 1, ragged=True).widths) == dict(greedy_counts([draft], 4, 1).widths)
    # a row that ends first leaves the batch's later steps to the other: they count for one row, not two
    uneven = [RowRuns(length=6, budget=6, matched=(0,) * 6), RowRuns(length=3, budget=3, matched=(0,) * 3)]
    counted = greedy_counts(uneven, 4, 2)
    assert dict(counted.widths) == {4: 2, 3: 2, 2: 1, 1: 1, 0: 1}
    assert sum(n for _, n in counted.widths) == counted.steps  # as `run` counts steps: per row


def test_costs_measured_on_a_busy_machine_say_the_ranking_is_noise_in_every_view():
    """Under load predict's best k and ranking changed between runs; where its timings were disturbed (other
    processes busy, or forwards whose median is far from their fastest) it says the speedups are too noisy to rank
    instead of ranking them with confidence. The acceptance, which timing does not touch, stands."""
    from vocabcheck.predict import cost
    from vocabcheck.predict.result import Candidate, Costs, KPrediction, Prediction, Counts
    from vocabcheck.methods import Method
    from vocabcheck.render import predict_report

    assert cost._noise({1: [0.010, 0.0101, 0.0102], 3: [0.02, 0.02, 0.021]}, others=0.05) == ""
    assert "other processes used 50% of the CPUs" in cost._noise({1: [0.01, 0.01, 0.01]}, others=0.5)
    assert "median time was 1.50x its fastest" in cost._noise({1: [0.010, 0.015, 0.016]}, others=None)

    def prediction(noise):
        costs = Costs(target_step_s=0.010, draft_step_s=0.001, verify_s=((2, 0.012),), noise=noise)
        row = KPrediction(Counts(k=1, steps=10, drafted=10, accepted=8), costs.speedup(1.8, 1))
        return Prediction(target="t", candidates=(Candidate(draft="d", method=Method.DRAFT, greedy=(row,),
                                                            costs=costs),),
                          prompts=1, tokens=20, source="generated", k_values=(1,), temperatures=(), batch_size=1,
                          device="cpu", dtype="float32", seconds=1.0)

    quiet, busy = prediction(""), prediction("other processes used 50% of the CPUs while costs were measured")
    assert quiet.noise == "" and predict_report.noise_line(quiet) is None
    assert busy.noise == "other processes used 50% of the CPUs while costs were measured"
    document = predict_report.predict_document(busy, command="vocabcheck predict t d")
    jsonschema.validate(document, schema("predict-1"))
    assert document["noise"] == busy.noise and document["drafts"][0]["cost_noise"] == busy.noise
    assert predict_report.predict_document(quiet, command="x")["noise"] is None
    assert "too noisy to rank" in predict_report.predict_markdown(busy, command="x")
    from rich.console import Console
    import io

    log = io.StringIO()
    predict_report.print_prediction(Console(file=log, width=80), busy)
    assert "speedups too noisy to rank" in " ".join(log.getvalue().split())


def test_an_engine_s_steps_are_timed_one_k_at_a_time_beside_a_plain_engine(monkeypatch):
    """`predict --engine vllm` (vLLM fixes k when it starts: an engine per k): the plain engine runs throughout and
    one k's engine beside it — never more than two engines' memory, whatever the k values — every batch size's rounds
    interleaving the two; a step's width is what the engine drafted per row; an idle engine (the largest k, its table
    0 everywhere) prices a served 0 as vLLM runs it; the engines' own CPU time is not other processes' load; and
    another engine's steps are not held to vocabcheck's own forwards."""
    from vocabcheck import machine
    from vocabcheck.predict import cost
    from vocabcheck.predict.result import Costs

    alive, most, started = set(), [0], []

    class Engine:
        def __init__(self, k, idle=False):
            self.k, self.idle, self.cpu_s = k, idle, 50.0  # what starting it cost, as its first answer says
            alive.add(self)
            most[0] = max(most[0], len(alive))
            started.append((k, idle))

        def steps(self, batch, tokens):
            self.cpu_s += 1.0
            if self.idle:  # drafts nothing, yet each step costs more than the plain engine's
                return [(0.013, batch, 0)] * tokens
            return [(0.010 * (1 + 0.1 * self.k), batch, self.k * batch)] * tokens

        def close(self):
            alive.discard(self)

    ticks = iter(range(0, 10_000, 100))  # every sample 100 s later: the machine busy all the time
    monkeypatch.setattr(machine.CpuSample, "now", classmethod(lambda cls: cls(next(ticks), None, 0.0)))
    measured = cost.engine_step_costs(Engine, (1, 4), (2, 1, 4), max_new_tokens=16)
    assert started == [(0, False), (1, False), (2, False), (4, False), (4, True)] and most[0] == 2 and not alive
    plain, steps, noise, spread, idle, by_k = measured[4]
    assert plain == pytest.approx(0.010) and dict(steps) == pytest.approx({1: 0.011, 2: 0.012, 4: 0.014})
    assert [(k, dict(own)) for k, own in by_k] == [(1, pytest.approx({1: 0.011})), (2, pytest.approx({2: 0.012})),
                                                   (4, pytest.approx({4: 0.014}))]
    assert noise == "" and spread == pytest.approx(1.0)
    assert idle == pytest.approx(0.013)  # the idle engine's steps are no width's: they price a served 0
    priced = Costs(target_step_s=0.01, draft_step_s=0.001, verify_s=(), plain_step_s=plain, step_s=steps,
                   engine="vLLM 0.32.0", idle_step_s=idle)
    assert priced.idle_speedup == pytest.approx(0.010 / 0.013)
    assert Costs(target_step_s=0.01, draft_step_s=0.001, verify_s=(), plain_step_s=plain).idle_speedup == 1.0
    # what the machine was doing besides: busy seconds all ours (the engines' CPU seconds) are no one else's load
    samples = iter([machine.CpuSample(0.0, 100.0, 0.0), machine.CpuSample(10.0, 120.0, 0.0)])
    monkeypatch.setattr(machine.CpuSample, "now", classmethod(lambda cls: next(samples)))

    class Quiet(Engine):
        def __init__(self, k, idle=False):
            super().__init__(k, idle)
            self.cpu_s = 0.0

        def steps(self, batch, tokens):
            self.cpu_s += 20.0 / 16  # 20 busy seconds over the 16 calls (4 rounds, 2 engines, the k and the idle
            return [(0.01, batch, self.k * batch)] * tokens  # one): all the engines'

    assert cost.engine_step_costs(Quiet, (1,), (1,), max_new_tokens=4)[1][2] == ""
    # vLLM's steps are vLLM's: vocabcheck's forwards (k draft forwards and a verification) are no floor for them
    slow_forwards = dict(target_step_s=0.010, draft_step_s=0.010, verify_s=((3, 0.02),), plain_step_s=0.010,
                         step_s=((2, 0.013),))
    assert Costs(**slow_forwards).width_cost(2) == pytest.approx(2 * 1.0 + 2.0)
    assert Costs(**slow_forwards, engine="vLLM 0.32.0").width_cost(2) == pytest.approx(1.3)


def test_on_vllm_a_k_is_priced_by_its_own_engine_s_steps():
    """vLLM's step cost depends on the engine's k, not on the rows' mean proposals alone: on its CPU build an n-gram
    step where every row drafted 4 (the k = 4 engine) took 44 ms and one of a mean of 4 in the k = 8 engine (some rows
    8, some none) 114 ms. Pooled by width, k = 4's cheap full steps were priced at the k = 8 engine's ragged ones (and a
    wider step held to no less than a narrower one): at batch 16 predict said 0.69x where vLLM measured 0.92x. So
    each k's engine keeps its own steps, a k is priced by them, and only the plain step is a floor there; vocabcheck's
    decoder (padded, one width a step) keeps the pooled, monotone widths."""
    from vocabcheck.predict import cost
    from vocabcheck.predict.result import Costs

    class Engine:
        def __init__(self, k, idle=False):
            self.k, self.idle, self.cpu_s = k, idle, 0.0

        def steps(self, batch, tokens):
            if self.k == 0 or self.idle:
                return [(0.010, batch, 0)] * tokens
            full, ragged = {4: (0.012, 0.020), 8: (0.014, 0.030)}[self.k]  # every row k; half the rows k, half none
            return [(full, batch, self.k * batch), (ragged, batch, self.k * batch // 2)] * (tokens // 2)

        def close(self):
            pass

    plain, steps, _, _, _, by_k = cost.engine_step_costs(Engine, (4,), (4, 8), max_new_tokens=8)[4]
    assert dict(steps)[4] == pytest.approx((0.012 + 0.030) / 2)  # two engines' steps of a mean of 4, pooled
    assert {k: dict(own) for k, own in by_k} == {4: pytest.approx({2: 0.020, 4: 0.012}),
                                                 8: pytest.approx({4: 0.030, 8: 0.014})}
    on_vllm = Costs(target_step_s=0.01, draft_step_s=0.0, verify_s=(), plain_step_s=plain, step_s=steps,
                    engine="vLLM 0.32.0", full_width=False, step_s_by_k=by_k)
    mix = ((2, 1), (4, 1))  # the replay's steps of k = 4: half ragged (a mean of 2), half full
    assert on_vllm.step_cost(4, mix) == pytest.approx((2.0 + 1.2) / 2)  # its own engine's, not held monotone
    assert on_vllm.step_cost(8, ((4, 1), (8, 1))) == pytest.approx((3.0 + 1.4) / 2)
    disturbed = replace(on_vllm, step_s_by_k=((4, ((2, 0.020), (4, 0.008))),))  # a step timed below a plain one
    assert disturbed.width_cost(4, 4) == pytest.approx(1.0)  # the floor that holds on every engine: a plain step
    pooled = Costs(target_step_s=0.01, draft_step_s=0.0, verify_s=(), plain_step_s=plain, step_s=steps,
                   full_width=False)  # vocabcheck's decoder: no per-k steps, widths held monotone
    assert pooled.step_cost(4, mix) == pytest.approx((2.0 + 2.1) / 2)
    assert on_vllm.speedup(2.8, 4, mix) > pooled.speedup(2.8, 4, mix)
