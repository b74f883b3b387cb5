"""Model families whose configs do not say how their cache behaves: never wrong output with exit code 0.

One test per family that once ran wrong or failed in vocabcheck's own code (RWKV, Llama 4 chunked attention, xLSTM,
Mamba2, RecurrentGemma): each is lossless, or refused with one line and exit code 2, or run by transformers with
output equal to its own ``generate``. The models are tiny, seeded, built from transformers configs and saved with a
64-word WordLevel tokenizer; the behavioural cache check (:mod:`vocabcheck.decode.load.cache_check`) is what refuses the
ones whose configs look like plain attention.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from transformers import AutoModelForCausalLM

from vocabcheck.decode import DecodeOptions, generate
from vocabcheck.decode.load.cache_check import cache_problem
from vocabcheck.decode.load.layout import CHUNKED, SLIDING, AttentionLayout, attention_layout
from vocabcheck.decode.plain import generate_plain
from vocabcheck.errors import UnsupportedModel
from vocabcheck.verdict import Alignment

V = 64
PROMPT = " ".join(f"w{i}" for i in (5, 9, 2, 33, 5, 9, 17))  # seven tokens, longer than the chunk of 4
NEW = 8
FAMILIES = {
    "rwkv": (tf.RwkvConfig, {"hidden_size": 16, "num_hidden_layers": 2, "attention_hidden_size": 16,
                             "intermediate_size": 32, "context_length": 64}),
    # layer 0 chunked (with RoPE), layer 1 full (NoPE); no mixture-of-experts layer: the cache is what is tested
    "llama4": (tf.Llama4TextConfig, {"hidden_size": 32, "intermediate_size": 64, "intermediate_size_mlp": 64,
                                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                     "head_dim": 8, "attention_chunk_size": 4, "no_rope_layers": [1, 0],
                                     "moe_layers": [], "initializer_range": 0.1}),
    "xlstm": (tf.xLSTMConfig, {"hidden_size": 128, "embedding_dim": 128, "num_heads": 4, "num_blocks": 1,
                               "num_hidden_layers": 1}),
    "mamba2": (tf.Mamba2Config, {"hidden_size": 32, "num_heads": 4, "head_dim": 16, "state_size": 8, "n_groups": 1,
                                 "num_hidden_layers": 1, "expand": 2, "chunk_size": 8}),
    # two layers: both recurrent blocks (the default pattern puts attention third), which transformers cannot run
    "recurrentgemma": (tf.RecurrentGemmaConfig, {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                                 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                                                 "lru_width": 32, "attention_window_size": 8}),
}


def build(name: str, seed: int = 0):
    config_class, options = FAMILIES[name]
    torch.manual_seed(seed)
    config = config_class(vocab_size=V, bos_token_id=None, eos_token_id=None, pad_token_id=None, **options)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory):
    """``family_dir(name)``: the family's tiny model saved like a hub checkpoint, with a WordLevel tokenizer."""
    from tokenizers import Tokenizer, models as tm, pre_tokenizers

    tokenizer = Tokenizer(tm.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    built = {}

    def saved(name: str):
        if name not in built:
            directory = tmp_path_factory.mktemp(name)
            build(name).save_pretrained(directory)
            (directory / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
            (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": None, "bos_token": None}),
                                                             encoding="utf-8")
            built[name] = directory
        return built[name]

    return saved


@pytest.fixture
def unmarked(monkeypatch):
    """Recurrent classes as transformers 5.25 ships them: not marked ``_is_stateful`` (5.18 to 5.24 mark them, and
    the static check refuses them by that mark). The behavioural check must catch such a model on any release."""
    for name in ("RwkvForCausalLM", "xLSTMForCausalLM", "RecurrentGemmaForCausalLM"):
        monkeypatch.setattr(getattr(tf, name), "_is_stateful", False, raising=False)


def transformers_generate(directory, prompt_ids, n=NEW):
    """transformers' own greedy output of the saved model, loaded as vocabcheck loads it (float32, CPU)."""
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    out = model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def run(cli, directory, method, *extra):
    draft = [directory] if method == "draft" else []
    return cli("run", directory, *draft, "--method", method, "--prompt", PROMPT, "--max-new-tokens", NEW,
               "--device", "cpu", "--json", *extra)


def one_line_error(code, err):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err and "bug in vocabcheck" not in err, (code, err)
    return lines[0]


def plain_equals_transformers(cli, directory):
    code, out, err = run(cli, directory, "none")
    assert code == 0, err
    sequence = json.loads(out)["sequences"][0]
    assert len(sequence["token_ids"]) == NEW
    assert sequence["token_ids"] == transformers_generate(directory, sequence["prompt_ids"])


# --- one test per family ------------------------------------------------------------------------------------------


def test_rwkv_is_refused_for_speculation_and_run_by_transformers(cli, family_dir, unmarked):
    """RWKV ignores the cache it is given: its config reads as full attention, so only its behaviour tells."""
    directory = family_dir("rwkv")
    for method in ("ngram", "draft"):
        line = one_line_error(*run(cli, directory, method)[::2])
        assert line.startswith(f"error: {directory}: rwkv: the cache check on the loaded weights failed: after a "
                               "prefill"), line
        assert "--method none" in line
    code, _, err = cli("bench", directory, directory, "--max-new-tokens", 2, "--device", "cpu", "--methods", "ngram")
    assert "the cache check on the loaded weights failed" in one_line_error(code, err)
    plain_equals_transformers(cli, directory)


def test_llama4_chunked_attention_is_masked_by_chunk(cli, family_dir):
    directory = family_dir("llama4")
    model = build("llama4").double()
    layout = attention_layout(model)
    assert layout.layer_types == (CHUNKED, "full_attention") and layout.chunk == 4 and layout.window is None
    assert cache_problem(model) is None
    # the check catches the old reading (the chunk taken for a window)
    as_window = AttentionLayout(layer_types=(SLIDING, SLIDING), window=4)
    all_chunked = build("llama4").double()
    all_chunked.config.layer_types = [CHUNKED, CHUNKED]
    assert "after a prefill" in cache_problem(all_chunked, as_window)
    # lossless in batches with left padding, rejections and holes, against transformers' own chunked masks
    generator = torch.Generator().manual_seed(3)
    rows = [torch.randint(0, V, (n,), generator=generator).tolist() for n in (3, 9, 14)]
    rows[1] = rows[1][:4] * 2 + [7]  # something for prompt lookup to find
    expected = [reference(model, row, 12) for row in rows]
    for k in (1, 4):
        result = generate(model, rows, DecodeOptions(method="ngram", k=k, max_new_tokens=12))
        assert [list(s.token_ids) for s in result.sequences] == expected, k
    code, out, err = run(cli, directory, "draft")
    assert code == 0, err
    sequence = json.loads(out)["sequences"][0]
    assert sequence["token_ids"] == transformers_generate(directory, sequence["prompt_ids"])


def reference(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_xlstm_is_refused_for_speculation_and_run_by_transformers(cli, family_dir, unmarked):
    directory = family_dir("xlstm")
    line = one_line_error(*run(cli, directory, "ngram")[::2])
    # 5.25's xLSTM fails in its own code given the cache (AttributeError); 5.19's runs and answers differently
    assert line.startswith((f"error: {directory}: xlstm: its forward with vocabcheck's KV cache fails "
                            "(AttributeError:", f"error: {directory}: xlstm: the cache check on the loaded weights "
                            "failed: after a prefill")), line
    assert "--method none" in line
    plain_equals_transformers(cli, directory)


def test_mamba2_config_is_read_as_transformers_reads_it(cli, family_dir):
    """Its config.json holds ``{"__float__": "Infinity"}``: refused for what it is (recurrent state), not for a
    config transformers could not read."""
    directory = family_dir("mamba2")
    assert '"__float__": "Infinity"' in (directory / "config.json").read_text(encoding="utf-8")
    line = one_line_error(*run(cli, directory, "ngram")[::2])
    assert line.startswith(f"error: {directory}: mamba2 keeps recurrent state"), line
    plain_equals_transformers(cli, directory)


def test_recurrentgemma_failing_in_its_own_code_is_reported_as_the_model_s(cli, family_dir):
    """transformers 5.25 cannot run this all-recurrent RecurrentGemma (5.19 can): where its own generate fails,
    plain decoding reports the model's failure in one line; where it runs, plain decoding gives its output."""
    directory = family_dir("recurrentgemma")
    try:
        transformers_generate(directory, [5, 9, 2])
    except ValueError as raised:  # transformers' own generate fails the same way
        line = one_line_error(*run(cli, directory, "none")[::2])
        assert line == (f"error: transformers cannot run this model (recurrent_gemma): ValueError: "
                        f"{str(raised).splitlines()[0]}"), line
    else:
        plain_equals_transformers(cli, directory)
    line = one_line_error(*run(cli, directory, "ngram")[::2])
    assert line.startswith(f"error: {directory}: recurrent_gemma keeps recurrent state"), line


# --- the check itself --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compared", ["final hidden states", "logits"])
def test_the_check_passes_an_exact_cache_and_names_a_broken_rollback(monkeypatch, compared):
    """A model whose cache behaves passes; the same model with a rollback that forgets one row's hole (the rejected
    slot stays visible) or takes back nothing fails, naming the rollback: comparing the final hidden states (Llama 4's
    head is position-wise) and comparing the logits (what a model whose head is not known gets)."""
    from vocabcheck.decode.load import cache_check
    from vocabcheck.decode.state import KVState

    if compared == "logits":
        monkeypatch.setattr(cache_check, "POSITIONWISE_HEAD", frozenset())
    model = build("llama4").double()
    assert cache_problem(model) is None
    rollback = KVState.rollback

    def without_holes(self, rejected, rejected_host):
        common = min(rejected_host)
        rollback(self, rejected.clamp(max=common), [common] * len(rejected_host))
        self.length = self.length - (rejected - common)  # positions count on, the slot stays visible

    def forgetful(self, rejected, rejected_host):
        self.length = self.length - rejected

    for broken in (without_holes, forgetful):
        monkeypatch.setattr(KVState, "rollback", broken)
        problem = cache_problem(model)
        assert problem is not None and "after a rollback in which rows took back different counts" in problem, \
            (broken.__name__, problem)
        assert f"its {compared} differ from one forward" in problem
        assert "float64 allows 1e-06" in problem


def test_the_check_leaves_out_the_output_head_only_where_the_head_is_position_wise(unmarked):
    """The head (152k rows on Qwen) is most of the check's cost: a model whose logits are a function of the hidden
    state at the same position (Llama 4) is checked without one product of it; RWKV, whose head is not on that list,
    keeps the logits comparison (and fails it)."""
    heads = []
    for name, used in (("llama4", False), ("rwkv", True)):
        model = build(name)
        hook = model.get_output_embeddings().register_forward_hook(lambda *_: heads.append(name))
        problem = cache_problem(model)
        hook.remove()
        assert (name in heads) == used, (name, heads)
        assert (problem is None) == (name == "llama4"), problem
    assert "its logits differ" in cache_problem(build("rwkv"))


# --- the library's entry point takes the same decision ------------------------------------------------------------


SAME_64 = Alignment(target_rows=V, draft_rows=V, target_input_rows=V, draft_input_rows=V, rows_source="tensors",
                    shared_ids=V, shared_ranges=((0, V),), mapping="same", draft_substitute_id=0, renamed_ids=())


@pytest.mark.parametrize("name", ["rwkv", "xlstm"])
def test_generate_called_directly_hands_an_unusable_cache_to_transformers(name, unmarked):
    """``decode.generate`` without a Session: plain decoding of a model whose cache the check refuses is
    transformers' own greedy output (it was wrong tokens for RWKV, an AttributeError for xLSTM)."""
    model = build(name)
    prompts = [[5, 9, 2, 33, 5, 9, 17], [7, 3]]
    result = generate(model, prompts, DecodeOptions(method="none", max_new_tokens=NEW))
    assert [list(s.token_ids) for s in result.sequences] == [reference(model, p, NEW) for p in prompts]


def test_generate_called_directly_refuses_speculation_on_an_unusable_cache(unmarked):
    """The same one-line error the session gives (exit 2 on the command line), for the target and for a draft."""
    rwkv, target = build("rwkv"), build("llama4")
    for method, pair in (("ngram", {}), ("draft", {"draft": rwkv, "alignment": SAME_64})):
        with pytest.raises(UnsupportedModel) as raised:
            generate(rwkv, [[5, 9, 2]], DecodeOptions(method=method), **pair)
        assert raised.value.problem.startswith("rwkv: the cache check on the loaded weights failed: after a prefill")
        assert "--method none" in raised.value.problem
    with pytest.raises(UnsupportedModel, match=r"^rwkv: the cache check on the loaded weights failed"):
        generate(target, [[5, 9, 2]], DecodeOptions(method="draft"), draft=rwkv, alignment=SAME_64)


def test_the_verdict_is_taken_once_per_model_object(monkeypatch):
    """The check runs on a model's first call, not on every call; another model object gets its own."""
    from vocabcheck.decode.load import cache_check

    runs = []
    check = cache_check.cache_problem
    monkeypatch.setattr(cache_check, "cache_problem", lambda model, *rest: runs.append(model) or check(model, *rest))
    model, other = build("llama4"), build("llama4")
    for _ in range(3):
        generate(model, [[5, 9, 2]], DecodeOptions(method="ngram", k=2, max_new_tokens=3))
    generate(other, [[5, 9, 2]], DecodeOptions(method="none", max_new_tokens=3))
    assert runs == [model, other]


# --- plain decoding through transformers counts like the engine --------------------------------------------------


def test_plain_decoding_through_transformers_keeps_the_metric_identity():
    model = build("mamba2")
    result = generate_plain(model, [[5, 9, 2], [7]], DecodeOptions(method="none", max_new_tokens=6), eos_ids=())
    metrics = result.metrics
    for row in metrics.rows:
        assert (row.generated, row.first_tokens, row.steps, row.accepted) == (6, 1, 5, 0)
    assert metrics.generated == metrics.first_tokens + metrics.steps + metrics.accepted == 12
    assert metrics.verify_passes == 10 and metrics.drafted == 0


def test_a_caller_s_failure_while_streaming_is_not_the_model_s():
    model = build("mamba2")

    def broken(row, tokens):
        raise BrokenPipeError("the reader went away")

    with pytest.raises(BrokenPipeError):
        generate_plain(model, [[5, 9]], DecodeOptions(method="none", max_new_tokens=3), eos_ids=(), on_tokens=broken)
