"""The versions a user reports, the one place the decoder meets transformers' cache API, and the engine option
without vLLM installed. The range itself is tested by running the whole suite at the declared floors and at the
releases vLLM pins (.ci/check-versions, constraints/)."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest
import torch

from vocabcheck.decode.state import cache_keyword


def test_version_names_vocabcheck_and_every_library_it_runs_on(cli):
    code, out, err = cli("--version")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == f"vocabcheck {metadata.version('vocabcheck')}"
    named = dict(line.split(" ", 1) for line in lines[1:])
    for library in ("torch", "transformers", "tokenizers", "huggingface_hub", "safetensors"):
        assert named[library] == metadata.version(library)
    assert named["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "vllm" in named  # its version, or "not installed"


class _OldForward(torch.nn.Module):
    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
        return past_key_values


class _NewForward(torch.nn.Module):
    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
        return cache


@pytest.mark.parametrize("module", [_OldForward(), _NewForward()], ids=["before-5.24", "from-5.24"])
def test_the_cache_goes_in_by_the_keyword_the_forward_takes(module):
    """A keyword the forward does not name lands in **kwargs and the model runs without the cache: wrong output."""
    marker = object()
    assert module(**{cache_keyword(module): marker}) is marker


def test_the_installed_transformers_model_takes_the_cache_by_the_chosen_keyword():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **{cache_keyword(model): cache})
    assert cache.get_seq_length() == 3  # the model wrote into the cache it was given


def test_engine_vllm_without_vllm_is_one_line_naming_the_install(cli, models, monkeypatch):
    target = models.qwen_pair()[0]
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError, as where it is not installed
    code, out, err = cli("run", target, "--method", "ngram", "--prompt", "x", "--engine", "vllm", "--json")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("error: --engine vllm needs vLLM") and "pip install 'vocabcheck[vllm" in lines[0]


def test_an_unknown_engine_is_one_line(cli):
    code, out, err = cli("run", "no-model", "--method", "none", "--prompt", "x", "--engine", "sglang")
    assert code == 2 and out == ""
    assert err.strip() == "error: --engine must be one of vocabcheck, vllm, not 'sglang'"
