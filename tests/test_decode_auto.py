"""``-k auto`` and any width a controller picks keep the decoder lossless: greedy output is the target's own and
sampled output follows its distribution, with steps that propose nothing in between (the draft catches up), on
full-attention and sliding-window layouts, padded and translated drafts, alone and in batches; one host sync per step
still; one sampler stream across the batches of a run."""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.distributions import chi_square, exact_distribution
from tests.support.widths import varying_widths  # noqa: F401  (a fixture)
from tests.test_decode import small_pair  # noqa: F401  (a fixture)
from tests.test_decode_layouts import SAME_VOCABULARY, layout_case, perturbed  # noqa: F401  (layout_case: a fixture)
from tests.test_decode_steps import syncs_per_step  # noqa: F401  (a fixture)
from tests.test_translate_decode import (TEXTS, load, qwen_mistral, reference,  # noqa: F401  (fixtures)
                                         small_translated_pair, translator_for)
from vocabcheck import compare
from vocabcheck.decode import DecodeOptions, Sampling, generate


def outputs(result):
    return [s.token_ids for s in result.sequences]


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_any_widths_and_auto_are_lossless_on_sliding_windows(layout_case, method, varying_widths, monkeypatch):
    name, target, draft, rows, expected = layout_case
    pair = {"draft": draft, "alignment": SAME_VOCABULARY} if method == "draft" else {}
    batched = generate(target, rows, DecodeOptions(method=method, max_new_tokens=40), **pair)
    assert outputs(batched) == expected, (name, method)
    alone = [generate(target, [p], DecodeOptions(method=method, max_new_tokens=40), **pair) for p in rows]
    assert [a.sequences[0].token_ids for a in alone] == expected, (name, method, "alone")
    assert 0 in varying_widths and max(varying_widths) > 1, "plain steps and catch-ups both ran"
    assert 0 < batched.metrics.accepted and batched.metrics.plain_steps > 0
    # the cost fit's catch-up: a draft owes one position per plain step since it proposed, beyond the one or two a
    # proposing step leaves it (the target's token, and the last proposal where a row accepted them all), and its
    # first proposing step of a call reads the prompt too (the draft's prefill waits for it); a lookup owes nothing
    caught_up = varying_widths.catch_ups
    if method == "draft":
        later = [(plain, catch_up) for plain, catch_up, first in caught_up if not first]
        assert all(max(0, plain - 1) <= catch_up <= plain for plain, catch_up in later), caught_up
        assert max(catch_up for _, catch_up in later) >= 2, caught_up
        shortest = min(len(p) for p in rows)
        assert all(catch_up >= plain + shortest - 1 for plain, catch_up, first in caught_up if first), caught_up
    else:
        assert caught_up and all(catch_up == 0 for _, catch_up, _ in caught_up)
    monkeypatch.undo()  # the real controller, as `run` uses it
    auto = generate(target, rows, DecodeOptions(method=method, k="auto", max_new_tokens=40), **pair)
    assert outputs(auto) == expected and auto.metrics.k == "auto", (name, method)


@pytest.mark.parametrize("direction", ["smaller draft vocabulary", "larger draft vocabulary"])
def test_any_widths_and_auto_are_lossless_for_a_translated_draft(qwen_mistral, direction, varying_widths,
                                                                monkeypatch):
    target_path, draft_path = qwen_mistral if direction == "smaller draft vocabulary" else qwen_mistral[::-1]
    comparison = compare(str(target_path), str(draft_path))
    translator = translator_for(comparison)
    prompts = [comparison.target.source.tokenizer.encode(text).ids for text in TEXTS]
    target, draft = load(target_path), load(draft_path)
    expected = [reference(target, p, 20) for p in prompts]
    options = DecodeOptions(max_new_tokens=20)
    assert options.k == "auto"
    batched = generate(target, prompts, options, draft=draft, translator=translator)
    assert outputs(batched) == expected, direction
    assert 0 in varying_widths and max(varying_widths) > 1 and batched.metrics.drafted > 0
    for prompt, tokens in zip(prompts, expected):
        assert generate(target, [prompt], options, draft=draft, translator=translator).sequences[0].token_ids == tokens
    monkeypatch.undo()
    assert outputs(generate(target, prompts, options, draft=draft, translator=translator)) == expected


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_sampled_output_with_varying_widths_follows_the_target_distribution(small_pair, method, varying_widths):
    """4,000 sampled 4-token continuations in 40 batches, with widths from 0 to 2 chosen at random each step, against
    the exact warped target distribution (chi-square below the 99.9th percentile, fixed seed)."""
    from scipy.stats import chi2

    target_dir, draft_dir = small_pair
    comparison = compare(str(target_dir), str(draft_dir))
    target, draft = load(target_dir, torch.float32), load(draft_dir, torch.float32)
    sampling = Sampling(temperature=1.3, top_k=4)
    prompt = [7, 100, 42]
    if method == "ngram":
        greedy = generate(target, [prompt], DecodeOptions(method="none", max_new_tokens=3)).sequences[0].token_ids
        prompt = prompt + list(greedy) + prompt
    expected = exact_distribution(target, prompt, 4, sampling)
    pair = {"draft": draft, "alignment": comparison.alignment} if method == "draft" else {}
    counts, metrics = sample_in_batches(target, prompt, DecodeOptions(method=method, k_max=2, max_new_tokens=4,
                                                                      sampling=sampling), pair)
    statistic, dof = chi_square(counts, expected, 4000)
    assert 0 in varying_widths and 2 in varying_widths
    assert 0 < sum(m.accepted for m in metrics) < sum(m.drafted for m in metrics)
    assert statistic < chi2.ppf(0.999, dof), (statistic, dof)


def sample_in_batches(target, prompt, options, pair, batches=40, size=100):
    """``batches`` × ``size`` samples of ``prompt``, one sampler stream across the batches (each batch gets its own
    widths from the controller)."""
    generator = torch.Generator().manual_seed(4321)
    counts: dict[tuple[int, ...], int] = {}
    metrics = []
    for _ in range(batches):
        result = generate(target, [prompt] * size, options, generator=generator, **pair)
        metrics.append(result.metrics)
        for sequence in result.sequences:
            counts[sequence.token_ids] = counts.get(sequence.token_ids, 0) + 1
    return counts, metrics


def test_sampled_translated_output_with_varying_widths_follows_the_target_distribution(small_translated_pair,
                                                                                      varying_widths):
    from scipy.stats import chi2

    target_dir, draft_dir = small_translated_pair
    comparison = compare(str(target_dir), str(draft_dir))
    target, draft = load(target_dir, torch.float32), load(draft_dir, torch.float32)
    sampling = Sampling(temperature=1.3, top_k=6)
    prompt = comparison.target.source.tokenizer.encode(" the rain in the").ids
    expected = exact_distribution(target, prompt, 3, sampling)  # 6³ sequences: 4,000 samples fill the cells
    counts, metrics = sample_in_batches(target, prompt, DecodeOptions(max_new_tokens=3, sampling=sampling),
                                        {"draft": draft, "translator": translator_for(comparison)})
    statistic, dof = chi_square(counts, expected, 4000)
    assert {0, 1} <= set(varying_widths) and 0 < sum(m.accepted for m in metrics)
    assert statistic < chi2.ppf(0.999, dof), (statistic, dof)


@pytest.mark.parametrize("k", [4, "auto", "varying"])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_k=8)])
def test_a_translated_step_reads_back_from_the_device_exactly_once(small_translated_pair, syncs_per_step, k, sampling,
                                                                   request):
    if k == "varying":
        request.getfixturevalue("varying_widths")
    target_dir, draft_dir = small_translated_pair
    comparison = compare(str(target_dir), str(draft_dir))
    target, draft = load(target_dir, torch.float32), load(draft_dir, torch.float32)
    prompts = [comparison.target.source.tokenizer.encode(t).ids for t in (" the rain", " in the rain on the", " an")]
    result = generate(target, prompts, DecodeOptions(k=4 if k == "varying" else k, max_new_tokens=16,
                                                     sampling=sampling),
                      draft=draft, translator=translator_for(comparison))
    assert len(syncs_per_step) == result.metrics.verify_passes > 3
    assert syncs_per_step == [1] * len(syncs_per_step)


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_an_auto_step_reads_back_from_the_device_exactly_once(layout_case, syncs_per_step, method):
    name, target, draft, rows, _ = layout_case
    pair = {"draft": draft, "alignment": SAME_VOCABULARY} if method == "draft" else {}
    result = generate(target, rows, DecodeOptions(method=method, max_new_tokens=20,
                                                  sampling=Sampling(temperature=0.8)), **pair)
    assert len(syncs_per_step) == result.metrics.verify_passes > 3
    assert syncs_per_step == [1] * len(syncs_per_step)


def test_a_run_draws_independent_samples_across_its_batches(cli, small_pair, tmp_path):
    """600 draws of the same prompt, 50 per batch: the sampler continues one stream from --seed instead of
    restarting it in every batch, so the batches differ and all 600 follow the target's distribution."""
    from scipy.stats import chi2

    target_dir, _ = small_pair
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w7 w100 w42\n" * 600, encoding="utf-8")
    code, out, err = cli("run", target_dir, "--method", "ngram", "--prompt-file", prompts, "--batch-size", 50,
                         "--temperature", "1.3", "--top-k", "4", "--max-new-tokens", 2, "--seed", 5, "--json")
    assert code == 0, err
    document = json.loads(out)
    samples = [tuple(s["token_ids"]) for s in document["sequences"]]
    assert len(samples) == 600
    batches = [samples[i:i + 50] for i in range(0, 600, 50)]
    assert len(set(map(tuple, batches))) == len(batches), "every batch draws its own samples"
    prompt_ids = document["sequences"][0]["prompt_ids"]
    expected = exact_distribution(load(target_dir, torch.float32), prompt_ids, 2, Sampling(temperature=1.3, top_k=4))
    counts: dict[tuple[int, ...], int] = {}
    for sample in samples:
        counts[sample] = counts.get(sample, 0) + 1
    statistic, dof = chi_square(counts, expected, len(samples))
    assert statistic < chi2.ppf(0.999, dof), (statistic, dof)
