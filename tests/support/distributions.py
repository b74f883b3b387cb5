"""Exact distributions of tiny models and the chi-square statistic the sampling tests hold the decoder to."""

from __future__ import annotations

import torch

from vocabcheck.decode.sampling import warp


def exact_distribution(model, prompt, steps, sampling):
    """P(t1..t_steps) under the target's warped distribution, by enumerating its support."""
    table = {(): 1.0}
    for _ in range(steps):
        grown = {}
        for prefix, mass in table.items():
            logits = model(torch.tensor([prompt + list(prefix)])).logits[0, -1]
            probs = warp(logits, sampling).double()
            for token in torch.nonzero(probs).flatten().tolist():
                grown[prefix + (token,)] = mass * probs[token].item()
        table = grown
    return table


def chi_square(counts, expected, n):
    """Pearson's statistic with cells of expected count < 5 pooled; returns (statistic, degrees of freedom)."""
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for key, prob in expected.items():
        e = prob * n
        o = counts.get(key, 0)
        if e < 5:
            pooled_obs += o
            pooled_exp += e
        else:
            stat += (o - e) ** 2 / e
            cells += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 1e-12)
        cells += 1
    assert sum(counts.values()) == n and set(counts) <= set(expected), "a sequence outside the support"
    return stat, cells - 1
