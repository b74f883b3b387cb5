"""The step loop's contract: metrics that count only emitted tokens, one device-to-host copy per step, honest times
after Ctrl-C, and options checked before anything runs."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from vocabcheck.decode import DecodeOptions, Sampling, generate
from vocabcheck.decode.load.loading import read_prompt_file
from vocabcheck.verdict import Alignment

V = 32
SAME_VOCABULARY = Alignment(target_rows=V, draft_rows=V, target_input_rows=V, draft_input_rows=V,
                            rows_source="tensors", shared_ids=V, shared_ranges=((0, V),), mapping="same",
                            draft_substitute_id=0, renamed_ids=())


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1)
    target = LlamaForCausalLM(config).eval().double()
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, V, (n,), generator=generator).tolist() for n in (4, 9, 15)]
    return target, prompts


def reference(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


def assert_counts_add_up(metrics, sequences):
    for row, sequence in zip(metrics.rows, sequences):
        assert row.generated == len(sequence.token_ids)
        assert row.generated == row.first_tokens + row.steps + row.accepted, row
        assert row.accepted <= row.drafted
    assert metrics.generated == metrics.first_tokens + metrics.steps + metrics.accepted
    assert metrics.generated == sum(len(s.token_ids) for s in sequences)
    assert sum(metrics.accepted_at) == metrics.accepted and sum(metrics.drafted_at) == metrics.drafted


@pytest.mark.parametrize("k", [3, 8])
def test_eos_and_length_cuts_inside_accepted_runs_count_only_emitted_tokens(tiny, k):
    """The draft is the target itself, so every proposal is accepted: eos (a token from the middle of each row's
    output) and the length budget (not a multiple of k + 1) both cut rows inside an accepted run. Only emitted
    tokens count, so the acceptance rate stays exactly 1 and generated = first + verifications + accepted."""
    target, prompts = tiny
    expected = [reference(target, p, 30) for p in prompts]
    stop = expected[0][6]
    result = generate(target, prompts, DecodeOptions(k=k, max_new_tokens=23), draft=target,
                      alignment=SAME_VOCABULARY, eos_ids=[stop])
    for sequence, tokens in zip(result.sequences, expected):
        tokens = tokens[:23]
        if stop in tokens:
            tokens = tokens[:tokens.index(stop) + 1]
        assert sequence.token_ids == tokens
        assert sequence.finish_reason == ("eos" if tokens[-1] == stop else "length")
    assert result.sequences[0].finish_reason == "eos"
    assert any(len(s.token_ids) == 23 for s in result.sequences), "a row must be cut by the length budget"
    assert result.metrics.acceptance_rate == 1.0
    assert_counts_add_up(result.metrics, result.sequences)


def test_counts_add_up_when_proposals_are_rejected(tiny):
    target, prompts = tiny
    draft = LlamaForCausalLM(target.config).eval().double()  # an unrelated draft: rejections everywhere
    for method, pair in (("draft", {"draft": draft, "alignment": SAME_VOCABULARY}), ("ngram", {})):
        result = generate(target, [p * 3 for p in prompts], DecodeOptions(method=method, k=4, max_new_tokens=17),
                          **pair)
        assert result.metrics.drafted > result.metrics.accepted
        assert_counts_add_up(result.metrics, result.sequences)


# --- one device-to-host copy per step --------------------------------------------------------------------------


SYNCING = ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero")


@pytest.fixture
def syncs_per_step(monkeypatch):
    """Counts, for every step of the loop, the tensor operations that make the host wait for the device (reading
    values back, truth tests, conversions to Python numbers), wherever they are called: in vocabcheck or inside
    transformers."""
    from vocabcheck.decode import engine

    counts: list[int] = []
    current = {"in_step": False, "n": 0}

    def counting(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            if current["in_step"]:
                current["n"] += 1
            return original(self, *args, **kwargs)

        return wrapper

    for name in SYNCING:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    step = engine.speculative_step

    def counted_step(batch):
        current["in_step"], current["n"] = True, 0
        try:
            step(batch)
        finally:
            current["in_step"] = False
            counts.append(current["n"])

    monkeypatch.setattr(engine, "speculative_step", counted_step)
    return counts


@pytest.mark.parametrize("method", ["draft", "ngram", "none"])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_k=8, top_p=0.9)])
def test_each_step_reads_back_from_the_device_exactly_once(tiny, syncs_per_step, method, sampling):
    target, prompts = tiny
    draft = LlamaForCausalLM(target.config).eval().double()
    pair = {"draft": draft, "alignment": SAME_VOCABULARY} if method == "draft" else {}
    result = generate(target, [p * 2 for p in prompts], DecodeOptions(method=method, k=4, max_new_tokens=20,
                                                                      sampling=sampling), **pair)
    assert len(syncs_per_step) == result.metrics.verify_passes > 3
    assert syncs_per_step == [1] * len(syncs_per_step)


def test_the_sync_counter_sees_a_second_read_back(tiny, syncs_per_step, monkeypatch):
    """The counter above is not blind: one extra .item() in the step is caught."""
    from vocabcheck.decode import verify

    accept = verify.accept

    def accept_and_peek(logits, *args):
        count, chosen = accept(logits, *args)
        count.sum().item()
        return count, chosen

    monkeypatch.setattr("vocabcheck.decode.engine.accept", accept_and_peek)
    target, prompts = tiny
    generate(target, prompts, DecodeOptions(method="none", max_new_tokens=5))
    assert set(syncs_per_step) == {2}


# --- Ctrl-C: what was generated, with honest times ----------------------------------------------------------------


def test_after_ctrl_c_unfinished_rows_report_their_own_time_per_token(tiny):
    target, prompts = tiny
    expected = [reference(target, p, 40) for p in prompts]
    seen = {"tokens": 0}

    def interrupt_later(row, tokens):
        seen["tokens"] += len(tokens)
        if seen["tokens"] >= 30:
            raise KeyboardInterrupt

    result = generate(target, prompts, DecodeOptions(method="ngram", k=3, max_new_tokens=40),
                      on_tokens=interrupt_later)
    assert result.interrupted
    for sequence, tokens in zip(result.sequences, expected):
        assert 1 < len(sequence.token_ids) < 40 and tokens[:len(sequence.token_ids)] == sequence.token_ids
    for row in result.metrics.rows:
        assert row.last_at > row.first_at > 0
        assert row.tpot_s == pytest.approx((row.last_at - row.first_at) / (row.generated - 1))
    assert result.metrics.tpot_ms > 0


# --- options ---------------------------------------------------------------------------------------------------


def test_prompt_files_split_at_newlines_only(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_bytes("one\u2028line\r\nform\x0cfeed and\u2029more\n\nlast\u0085line\n".encode())
    assert [p.text for p in read_prompt_file(path)] == ["one\u2028line", "form\x0cfeed and\u2029more",
                                                        "last\u0085line"]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text(json.dumps("a\u2028b") + "\r\n" + json.dumps({"prompt": "c"}) + "\n", encoding="utf-8")
    assert [p.text for p in read_prompt_file(jsonl)] == ["a\u2028b", "c"]


@pytest.mark.parametrize("option, words", [
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--top-p", "nan"], "--top-p must be in (0, 1]"),
    (["--top-k", "-1"], "--top-k must be 0 (off) or more"),
    (["--temperature", "-0.5"], "--temperature must be 0 (greedy) or more"),
    (["-k", "0"], "-k / --num-speculative-tokens must be between 1 and 64"),
    (["-k", "65"], "-k / --num-speculative-tokens must be between 1 and 64"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--ngram-min", "3", "--ngram-max", "2"], "need 1 <= --ngram-min <= --ngram-max"),
])
def test_bad_decoding_options_get_one_line_and_exit_2_before_any_model_loads(cli, tmp_path, option, words):
    missing = tmp_path / "no-model-here"  # never opened: the options are refused first
    code, _, err = cli("run", missing, missing, "--prompt", "x", *option)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ["draft", "ngram", "none"])
def test_cuda_steps_synchronise_only_in_the_read_back(tiny, monkeypatch, method):
    """On CUDA, torch's sync debug mode raises on any synchronising call inside the step but the one read-back."""
    import copy

    from vocabcheck.decode import engine

    step, read = engine.speculative_step, engine.device_to_host

    def strict_step(batch):
        torch.cuda.set_sync_debug_mode("error")
        try:
            step(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    def allowed_read(tensor):
        torch.cuda.set_sync_debug_mode("default")
        try:
            return read(tensor)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    monkeypatch.setattr(engine, "speculative_step", strict_step)
    monkeypatch.setattr(engine, "device_to_host", allowed_read)
    target, prompts = tiny
    target = copy.deepcopy(target).to("cuda")
    pair = {"draft": target, "alignment": SAME_VOCABULARY} if method == "draft" else {}
    for sampling in (Sampling(), Sampling(temperature=0.8, top_k=8)):
        result = generate(target, [p * 2 for p in prompts], DecodeOptions(method=method, k=4, max_new_tokens=20,
                                                                          sampling=sampling), **pair)
        assert result.metrics.verify_passes > 3


def test_draw_follows_each_rows_distribution_and_never_picks_a_zero():
    """The sampler the engine uses everywhere: 60,000 draws per row of two rows with zero entries, chi-square against
    the exact probabilities (fixed seed, 99.9th percentile)."""
    from scipy.stats import chi2

    from vocabcheck.decode.sampling import draw

    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3, 0.0], [0.0, 0.05, 0.0, 0.9, 0.05]])
    generator = torch.Generator().manual_seed(5)
    n = 60_000
    picks = draw(probs[:, None, :].expand(2, n, 5), generator)
    for row in range(2):
        counts = torch.bincount(picks[row], minlength=5).double()
        assert counts[probs[row] == 0].sum() == 0
        expected = probs[row] * n
        seen = expected > 0
        statistic = (((counts - expected) ** 2)[seen] / expected[seen]).sum().item()
        assert statistic < chi2.ppf(0.999, int(seen.sum()) - 1), (row, statistic)
