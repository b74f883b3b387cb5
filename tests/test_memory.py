"""The CPU decoder keeps freed memory in glibc's heap (a wide step's logits are tens of MB: a fresh mapping each step
faulted in 12,000 pages), once per process, unless the user opts out."""

from __future__ import annotations

import sys

import pytest

from vocabcheck.decode.cpu import memory


@pytest.fixture()
def calls(monkeypatch):
    """mallopt replaced by a recorder (the real one changes this process's allocator for good)."""
    made = []
    monkeypatch.setattr(memory, "glibc_mallopt", lambda: lambda option, value: made.append((option, value)) or 1)
    memory.keep_freed_memory.cache_clear()
    yield made
    memory.keep_freed_memory.cache_clear()


def test_the_thresholds_are_raised_once_per_process(calls, monkeypatch):
    monkeypatch.delenv(memory.OPT_OUT, raising=False)
    assert memory.keep_freed_memory() is True
    assert memory.keep_freed_memory() is True
    assert calls == [(memory.M_MMAP_THRESHOLD, memory.LIMIT), (memory.M_TRIM_THRESHOLD, memory.LIMIT)]


def test_a_user_can_leave_the_allocator_alone(calls, monkeypatch):
    monkeypatch.setenv(memory.OPT_OUT, "0")
    assert memory.keep_freed_memory() is False and calls == []


def test_a_cpu_batch_asks_for_it(calls, monkeypatch):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from vocabcheck.decode import DecodeOptions, generate

    monkeypatch.delenv(memory.OPT_OUT, raising=False)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    generate(LlamaForCausalLM(config).eval(), [[1, 2, 3]], DecodeOptions(method="none", max_new_tokens=2))
    assert len(calls) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc is Linux's")
def test_glibc_is_found_on_linux_and_takes_the_setting():
    mallopt = memory.glibc_mallopt()
    if mallopt is None:  # a Linux without glibc (musl): nothing to set, and nothing is set
        memory.keep_freed_memory.cache_clear()
        assert memory.keep_freed_memory() is False
        return
    assert mallopt(memory.M_MMAP_THRESHOLD, memory.LIMIT) == 1  # what the engine sets: accepted by this glibc
