"""Sampling at the edges of float32: a temperature so small (or so large) that dividing the logits by it overflows
gives the limit distribution, never NaN; and ``draw`` never turns a distribution that is not one into a token id."""

from __future__ import annotations

import json

import pytest
import torch

from vocabcheck.decode.sampling import GREEDY_BLOCK, NO_TOKEN, Sampling, check_drawn, draw, pick_greedy, warp
from vocabcheck.errors import UnsupportedModel


@pytest.mark.parametrize("temperature", [1e-45, 1e-40, 1e-300, 5e-324])
def test_a_vanishing_temperature_warps_to_the_greedy_point_mass(temperature):
    logits = torch.tensor([[1.0, 3.5, -2.0, 3.4999, float("-inf")], [-40.0, -41.0, -39.5, -39.5, -60.0]])
    p = warp(logits, Sampling(temperature=temperature))
    assert torch.isfinite(p).all()
    assert p[0].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]  # the argmax, by a margin far below float32's spacing at 1/t
    assert p[1].tolist() == [0.0, 0.0, 0.5, 0.5, 0.0]  # an exact tie splits evenly
    generator = torch.Generator().manual_seed(0)
    assert draw(p[:1].expand(1000, 5), generator).unique().tolist() == [1]


@pytest.mark.parametrize("sampling", [Sampling(temperature=1e-45, top_k=2), Sampling(temperature=1e-45, top_p=0.3)])
def test_the_greedy_limit_survives_top_k_and_top_p(sampling):
    p = warp(torch.tensor([[0.5, 2.0, 1.0]]), sampling)
    assert p.tolist() == [[0.0, 1.0, 0.0]]


def test_a_huge_temperature_is_uniform_over_the_rows_that_exist():
    """Draft logits mapped onto the target's rows are -inf outside the shared ids; -inf / inf would be NaN."""
    p = warp(torch.tensor([[5.0, float("-inf"), -3.0, 1e30]]), Sampling(temperature=1e300))
    assert torch.isfinite(p).all()
    assert p.tolist() == [[pytest.approx(1 / 3), 0.0, pytest.approx(1 / 3), pytest.approx(1 / 3)]]


def test_draw_never_returns_an_id_from_a_distribution_that_is_not_one():
    probs = torch.tensor([[0.2, float("nan"), 0.8],  # a NaN anywhere
                          [float("nan")] * 3,
                          [0.0, float("inf"), 0.0],
                          [0.0, 0.0, 0.0],  # no mass at all
                          [0.0, 0.0, 1.0]])  # the one real distribution, last row: the old clamp's answer
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):
        picks = draw(probs, generator).tolist()
        assert picks == [NO_TOKEN] * 4 + [2]
    with pytest.raises(UnsupportedModel, match="not finite"):
        check_drawn([5, NO_TOKEN])
    check_drawn([0, 5])


def _first_argmax(row: list[float]) -> int:
    return row.index(max(row))


def test_the_greedy_pick_is_the_first_maximum_wherever_it_lies():
    """Greedy decoding's token is the first index of the row's maximum (torch's ``max``), whatever the vocabulary's
    size and wherever ties and the maximum fall against the CPU's blocks; a row that is not a distribution is
    NO_TOKEN."""
    size = 3 * GREEDY_BLOCK + 7  # a short last block
    rows = torch.full((9, size), -5.0)
    rows[0, GREEDY_BLOCK - 1] = rows[0, GREEDY_BLOCK] = 2.0  # a tie across a block edge
    rows[1, 10] = rows[1, size - 1] = 2.0  # a tie between the first block and the short last one
    rows[2, size - 1] = 3.0  # the maximum in the short last block's last slot
    rows[3, size - 8] = 3.0  # ... in the last full block's last slot
    rows[4, 40], rows[4, 900] = 0.0, -0.0  # zeros of both signs tie
    rows[5, 3], rows[5, 700] = 9.0, float("nan")  # a NaN anywhere
    rows[6, 1200] = float("inf")
    rows[7] = float("-inf")  # nothing above -inf
    rows[8] = 1.0  # every logit ties
    assert pick_greedy(rows).tolist() == [GREEDY_BLOCK - 1, 10, size - 1, size - 8, 40, NO_TOKEN, NO_TOKEN, NO_TOKEN, 0]
    generator = torch.Generator().manual_seed(0)
    for vocabulary in (2 * GREEDY_BLOCK, 151_936, 152_064):  # whole blocks, and the demo pair's two sizes
        steps = torch.randint(-4, 4, (3, 5, vocabulary), generator=generator).float()  # [rows, slots, V], many ties
        picks = pick_greedy(steps[:, 1:])  # a slice that is not contiguous, as the engine's are
        assert picks.tolist() == [[_first_argmax(slot) for slot in row] for row in steps[:, 1:].tolist()]


def test_run_at_a_vanishing_temperature_emits_the_greedy_tokens(cli, qwen_pair):
    """Before: every token was the last vocabulary id (151935), exit 0."""
    target, draft = qwen_pair
    outputs = {}
    for temperature in ("0", "1e-45"):
        for method in ("draft", "none"):
            argv = ["run", target] + ([draft] if method == "draft" else []) + [
                "--method", method, "--prompt", "Speculative decoding is", "--max-new-tokens", 8, "--json",
                "--temperature", temperature]
            code, out, err = cli(*argv)
            assert code == 0, err
            outputs[temperature, method] = json.loads(out)["sequences"][0]["token_ids"]
    assert len(set(map(tuple, outputs.values()))) == 1, outputs
    assert outputs["0", "none"][-1] != 151935


# --- a draft whose logits are not finite: one line, never an index ------------------------------------------------


def _not_finite_head(model) -> None:
    with torch.no_grad():
        model.get_output_embeddings().weight.fill_(float("nan"))


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_k=8)], ids=["greedy", "sampled"])
def test_a_draft_with_nan_logits_is_refused_by_the_library(sampling):
    """Before: the draft's NO_TOKEN reached an embedding (IndexError, exit 3) when sampling, and a greedy draft
    proposed the NaN's index as if it were a token."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from vocabcheck.decode import DecodeOptions, generate
    from vocabcheck.verdict import Alignment

    rows = 32
    config = LlamaConfig(vocab_size=rows, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(7)
    target, draft = LlamaForCausalLM(config).eval(), LlamaForCausalLM(config).eval()
    # -k auto runs a draft that can pay: one far smaller than its target (a draft as large as its target is never run
    # by auto, below, so there is nothing to refuse)
    small = LlamaForCausalLM(LlamaConfig(vocab_size=rows, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    for model in (draft, small):
        _not_finite_head(model)
    same = Alignment(target_rows=rows, draft_rows=rows, target_input_rows=rows, draft_input_rows=rows,
                     rows_source="tensors", shared_ids=rows, shared_ranges=((0, rows),), mapping="same",
                     draft_substitute_id=0, renamed_ids=())
    prompts = [[1, 2, 3], [4, 5]]
    # auto proposes once it has priced a plain step (a few plain steps, counted, not timed): 32 tokens leave room
    for k, proposer, tokens in ((1, draft, 8), (3, draft, 8), ("auto", small, 32)):
        with pytest.raises(UnsupportedModel, match=r"^the draft model's next-token probabilities are not finite"):
            generate(target, prompts, DecodeOptions(k=k, max_new_tokens=tokens, sampling=sampling), draft=proposer,
                     alignment=same)
    if sampling.greedy:  # the draft auto never runs: the target's own output, nothing refused
        plain = generate(target, prompts, DecodeOptions(method="none", max_new_tokens=8))
        auto = generate(target, prompts, DecodeOptions(k="auto", max_new_tokens=8), draft=draft, alignment=same)
        assert [s.token_ids for s in auto.sequences] == [s.token_ids for s in plain.sequences]
        assert auto.metrics.drafted == 0


@pytest.mark.parametrize("temperature", ["0", "0.8"])
def test_run_with_a_nan_draft_exits_2_with_one_line(cli, models, qwen_pair, tmp_path, temperature):
    """Through the command line: the draft's output head is NaN (its decoder, and so the cache check, is sound)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from vocabcheck.demo import qwen

    target, _ = qwen_pair
    draft = tmp_path / "draft"
    shutil.copytree(models.model("qwen-draft-151936-untied", rows=qwen.ROWS_SMALL, tied=False, seed=2), draft)
    weights = draft / "model.safetensors"
    tensors = load_file(weights)
    tensors["lm_head.weight"] = torch.full_like(tensors["lm_head.weight"], float("nan"))
    save_file(tensors, weights, metadata={"format": "pt"})
    code, _, err = cli("run", target, draft, "--method", "draft", "--prompt", "Speculative decoding is",
                       "--max-new-tokens", 8, "--temperature", temperature, "-k", 3)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert lines[0].startswith("error: the draft model's next-token probabilities are not finite"), lines[0]


# --- a target whose logits or hidden states are not finite: refused, greedy and plain decoding included -----------


def _tiny_llama_pair():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(7)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("method", ["none", "ngram"])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8)], ids=["greedy", "sampled"])
def test_a_target_with_nan_logits_is_refused_not_decoded(method, sampling):
    """Before: greedy decoding took the argmax of NaN logits (the first NaN's index) as the target's token and
    emitted it with no error. The head is NaN, the decoder sound: the cache check (hidden states) passes it, and the
    step refuses the first token."""
    from vocabcheck.decode import DecodeOptions, generate

    target = _tiny_llama_pair()
    _not_finite_head(target)
    with pytest.raises(UnsupportedModel, match=r"^the model's next-token probabilities are not finite"):
        generate(target, [[1, 2, 3, 1, 2, 3], [4, 5]],
                 DecodeOptions(method=method, k=2, max_new_tokens=8, sampling=sampling))


def test_a_target_whose_own_forward_is_not_finite_is_refused_for_plain_decoding_too():
    """Before: a model whose hidden states are NaN failed the cache check, and plain decoding handed it to
    transformers' generate, which emitted argmax-of-NaN tokens with no error."""
    from vocabcheck.decode import DecodeOptions, generate

    target = _tiny_llama_pair()
    with torch.no_grad():
        target.model.norm.weight.fill_(float("nan"))
    for method in ("none", "ngram"):
        with pytest.raises(UnsupportedModel, match="not finite"):
            generate(target, [[1, 2, 3]], DecodeOptions(method=method, k=2, max_new_tokens=4))
