"""Every attention layout is lossless or refused.

Sliding-window models (all layers sliding like Mistral v0.1; full then sliding like Qwen2 with max_window_layers;
alternating like Gemma 2), with contexts several windows long, batches whose rows are left-padded and accept
different counts, both methods, k in {1, 4, 8}: greedy output equals transformers' own greedy output of the target
alone, row by row. Models whose cache cannot be rolled back are refused for speculation with one line (exit 2) and
still run plainly. The models are tiny, seeded and built from transformers configs; float64 keeps every argmax away
from rounding.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from vocabcheck.decode import DecodeOptions, generate
from vocabcheck.decode.load.layout import attention_layout, rollback_problem
from vocabcheck.verdict import Alignment

V = 32  # a small vocabulary: random models repeat themselves, so n-gram proposals are accepted now and then
WINDOW = 8
NEW = 40  # with prompts of 5-21 tokens: contexts of three to seven windows
LAYOUTS = {
    "mistral-all-sliding": (MistralConfig, MistralForCausalLM, {"sliding_window": WINDOW}),
    "qwen2-full-then-sliding": (Qwen2Config, Qwen2ForCausalLM, {"use_sliding_window": True,
                                                                "sliding_window": WINDOW, "max_window_layers": 1}),
    "gemma2-alternating": (Gemma2Config, Gemma2ForCausalLM, {"sliding_window": WINDOW, "head_dim": 16,
                                                             "tie_word_embeddings": False}),
}
SAME_VOCABULARY = Alignment(target_rows=V, draft_rows=V, target_input_rows=V, draft_input_rows=V,
                            rows_source="tensors", shared_ids=V, shared_ranges=((0, V),), mapping="same",
                            draft_substitute_id=0, renamed_ids=())


def build(config_class, model_class, seed: int, **options):
    torch.manual_seed(seed)
    config = config_class(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1, **options)
    return model_class(config).eval().double()


def perturbed(model, seed: int, scale: float = 0.05):
    """A draft made from the target's weights plus noise: accepted often, not always."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(scale * parameter.std() * torch.randn(parameter.shape, generator=generator,
                                                                 dtype=parameter.dtype))
    return draft


def reference(model, prompt, n=NEW):
    """transformers' own greedy output of the model alone (its own sliding-window cache, no padding)."""
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


def prompts():
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, V, (n,), generator=generator).tolist() for n in (5, 13, 21)]
    rows[1] = rows[1][:6] * 2 + [3]  # a repeating prompt: something for prompt lookup to find
    return rows


@pytest.fixture(scope="module", params=list(LAYOUTS))
def layout_case(request):
    config_class, model_class, options = LAYOUTS[request.param]
    target = build(config_class, model_class, 1, **options)
    rows = prompts()
    expected = [reference(target, p) for p in rows]
    wide = copy.deepcopy(target)
    wide.config.sliding_window = 10_000
    # the window changes what the target says on these contexts, so a decoder that counts it wrongly is caught
    assert any(reference(wide, p) != e for p, e in zip(rows, expected)), request.param
    return request.param, target, perturbed(target, 2), rows, expected


@pytest.fixture
def holes(monkeypatch):
    """Records every rollback of the target's or the draft's cache in which rows rejected different counts, so
    that some rows kept masked holes."""
    from vocabcheck.decode.state import KVState

    seen = []
    rollback = KVState.rollback

    def recording(self, rejected, rejected_host):
        if max(rejected_host, default=0) > min(rejected_host, default=0):
            seen.append(list(rejected_host))
        return rollback(self, rejected, rejected_host)

    monkeypatch.setattr(KVState, "rollback", recording)
    return seen


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_sliding_window_models_are_lossless_alone_and_in_batches(layout_case, method, holes):
    name, target, draft, rows, expected = layout_case
    layout = attention_layout(target)
    assert layout.sliding and layout.window == WINDOW
    assert layout.mixed == (name != "mistral-all-sliding")
    pair = {"draft": draft, "alignment": SAME_VOCABULARY} if method == "draft" else {}
    for k in (1, 4, 8):
        batched = generate(target, rows, DecodeOptions(method=method, k=k, max_new_tokens=NEW), **pair)
        assert [s.token_ids for s in batched.sequences] == expected, (name, method, k)
        assert 0 < batched.metrics.accepted < batched.metrics.drafted, "both accept and reject paths run"
        assert holes, "rows must reject different counts in some step (masked holes in the cache)"
        holes.clear()
        for prompt, tokens in zip(rows, expected):
            alone = generate(target, [prompt], DecodeOptions(method=method, k=k, max_new_tokens=NEW), **pair)
            assert alone.sequences[0].token_ids == tokens, (name, method, k, "alone")


def test_a_full_attention_draft_for_a_sliding_target(layout_case):
    """Draft and target need not share a layout: each cache is masked by its own."""
    name, target, _, rows, expected = layout_case
    draft = build(LlamaConfig, LlamaForCausalLM, 3)
    assert not attention_layout(draft).sliding
    result = generate(target, rows, DecodeOptions(k=4, max_new_tokens=NEW), draft=draft, alignment=SAME_VOCABULARY)
    assert [s.token_ids for s in result.sequences] == expected, name


def test_a_sliding_draft_for_a_full_attention_target():
    target = build(LlamaConfig, LlamaForCausalLM, 4)
    draft = perturbed(build(MistralConfig, MistralForCausalLM, 4, sliding_window=WINDOW), 5)
    rows = prompts()
    expected = [reference(target, p) for p in rows]
    for k in (1, 4):
        result = generate(target, rows, DecodeOptions(k=k, max_new_tokens=NEW), draft=draft,
                          alignment=SAME_VOCABULARY)
        assert [s.token_ids for s in result.sequences] == expected, k


# --- models whose cache cannot be rolled back ----------------------------------------------------------------



def test_recurrent_and_linear_attention_layouts_are_named(tmp_path):
    from transformers import MambaConfig, MambaForCausalLM, Qwen3NextConfig

    mamba = MambaConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1)
    assert "recurrent state" in rollback_problem(mamba, MambaForCausalLM)
    hybrid = Qwen3NextConfig(vocab_size=V, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2)
    problem = rollback_problem(hybrid, None)
    assert problem is not None and "cannot be rolled back" in problem, problem
    for config_class, model_class, options in LAYOUTS.values():
        assert rollback_problem(config_class(vocab_size=V, **options), model_class) is None


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory, qwen25_json):
    """A tiny Mamba model with the Qwen2.5 tokenizer, saved like a hub checkpoint."""
    from transformers import MambaConfig, MambaForCausalLM

    from vocabcheck.demo import qwen

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(vocab_size=qwen.ROWS_SMALL, hidden_size=16, state_size=4,
                                         num_hidden_layers=1, eos_token_id=qwen.ENDOFTEXT))
    directory = tmp_path_factory.mktemp("mamba")
    model.save_pretrained(directory)
    (directory / "tokenizer.json").write_text(qwen25_json.read_text(encoding="utf-8"), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps(qwen.tokenizer_config()), encoding="utf-8")
    return directory


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_speculation_on_a_recurrent_model_is_refused_with_one_line(cli, mamba_dir, method):
    argv = ["run", mamba_dir] + ([mamba_dir] if method == "draft" else []) + [
        "--method", method, "--prompt", "hello", "--max-new-tokens", 4]
    code, out, err = cli(*argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {mamba_dir}: mamba keeps recurrent state"), err
    assert "--method none" in lines[0] and "Traceback" not in err


def test_plain_decoding_runs_a_recurrent_model(cli, mamba_dir):
    code, out, err = cli("run", mamba_dir, "--method", "none", "--prompt", "hello", "--max-new-tokens", 4, "--json")
    assert code == 0, err
    assert len(json.loads(out)["sequences"][0]["token_ids"]) == 4
