"""`run --translate`: speculative decoding across two tokenizers through the tokens they share, lossless.

Greedy output is the target's own (alone and in batches, with a draft vocabulary smaller and larger than the
target's, and with a draft that splits words differently); sampled output in a batch follows the target's exact
warped distribution (chi-square); and a draft that is the target's own network re-indexed for another tokenizer
reaches an acceptance of at least 0.9 — the proof that the mapping between the vocabularies is right.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.support.distributions import chi_square, exact_distribution
from vocabcheck import compare
from vocabcheck.decode import DecodeOptions, Sampling, generate
from vocabcheck.decode.translate import Translator
from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import ModelShape, write_model

MISTRAL_CONFIG = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}
MISTRAL_GENERATION = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}
TEXTS = ["def fibonacci(n):\n    return", "The quick brown fox jumps", "Größe, naïve café — 日本語 🤖 done"]


def load(path, dtype=torch.float64):
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


def translator_for(comparison) -> Translator:
    return Translator(comparison.translation, comparison.draft.source.tokenizer, comparison.target.tokenizer.tokens)


def reference(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


@pytest.fixture(scope="module")
def qwen_mistral(models, mistral_json):
    """A Qwen2.5-tokenizer model (151,936 rows) and a Mistral v3 model (32,768 rows): two tokenizers that split text
    differently, both sizes of draft vocabulary."""
    qwen_model = models.model("translate-qwen-151936", rows=qwen.ROWS_SMALL, seed=21, hidden=48)
    mistral_model = models.model("translate-mistral-v3-32768", rows=32768, seed=22, hidden=48,
                                 tokenizer=mistral_json("v3"), tokenizer_config=MISTRAL_CONFIG,
                                 generation_config=MISTRAL_GENERATION)
    return qwen_model, mistral_model


@pytest.mark.parametrize("direction", ["smaller draft vocabulary", "larger draft vocabulary"])
def test_greedy_translated_output_is_the_targets_own_alone_and_in_batches(qwen_mistral, direction):
    target_path, draft_path = qwen_mistral if direction == "smaller draft vocabulary" else qwen_mistral[::-1]
    comparison = compare(str(target_path), str(draft_path))
    assert comparison.verdict.value == "incompatible" and comparison.translation.translatable
    translator = translator_for(comparison)
    tokenizer = comparison.target.source.tokenizer
    prompts = [tokenizer.encode(text).ids for text in TEXTS]
    target, draft = load(target_path), load(draft_path)
    expected = [reference(target, p, 20) for p in prompts]
    for k in (1, 4):
        batched = generate(target, prompts, DecodeOptions(k=k, max_new_tokens=20), draft=draft,
                           translator=translator)
        assert [s.token_ids for s in batched.sequences] == expected, (direction, k)
        assert batched.metrics.translated and batched.metrics.drafted > 0
        for prompt, tokens in zip(prompts, expected):
            alone = generate(target, [prompt], DecodeOptions(k=k, max_new_tokens=20), draft=draft,
                             translator=translator)
            assert alone.sequences[0].token_ids == tokens, (direction, k, "alone")


def test_target_tokens_outside_the_shared_set_are_re_encoded_for_the_draft(qwen_mistral):
    """Qwen's byte-level tokens for CJK and emoji pieces have no Mistral counterpart: the target emits such tokens,
    the draft gets their bytes re-encoded in its own tokenization, and the metrics count both."""
    target_path, draft_path = qwen_mistral
    comparison = compare(str(target_path), str(draft_path))
    translator = translator_for(comparison)
    shared = set(comparison.translation.pairs[0])
    tokenizer = comparison.target.source.tokenizer
    prompt = tokenizer.encode("日本語のテキスト 🤖🤖").ids
    outside = [t for t in prompt if t not in shared]
    assert outside, "the prompt must hold target tokens the draft lacks"
    target, draft = load(target_path), load(draft_path)
    result = generate(target, [prompt], DecodeOptions(k=4, max_new_tokens=24), draft=draft, translator=translator)
    assert result.sequences[0].token_ids == reference(target, prompt, 24)
    emitted_outside = sum(t not in shared for t in result.sequences[0].token_ids)
    assert result.metrics.outside_shared == emitted_outside
    assert result.metrics.reencodings >= (1 if emitted_outside else 0)
    # the draft's view of the prompt carries the same bytes as the target's
    from vocabcheck.decode.translate import prompt_ids

    draft_ids = prompt_ids(translator, prompt)
    assert comparison.translation.draft_bytes(draft_ids) == comparison.translation.target_bytes(prompt)


# --- the proof that the mapping is right: the target's own network, re-indexed --------------------------------


@pytest.fixture(scope="module")
def reindexed(models, mistral_json):
    """A Mistral v1 target (32,000 rows) and the same network re-indexed for the v3 tokenizer (32,768 rows, 768
    control tokens first): every string keeps its weights, at its v3 id. The re-indexing is computed here from the
    two tokenizer files, independently of vocabcheck's translation."""
    v1, v3 = (json.loads(mistral_json(v).read_text(encoding="utf-8")) for v in ("v1", "v3"))
    target = models.model("translate-mistral-v1-32000", rows=32000, seed=31, hidden=48, tokenizer=mistral_json("v1"),
                          tokenizer_config=MISTRAL_CONFIG, generation_config=MISTRAL_GENERATION)
    strings_v1 = {token: i for token, i in v1["model"]["vocab"].items()}
    strings_v3 = {token: i for token, i in v3["model"]["vocab"].items()}
    common = [(i, strings_v3[token]) for token, i in strings_v1.items() if token in strings_v3]
    assert len(common) == 32000
    directory = models.root / "translate-mistral-v3-reindexed"
    if not directory.is_dir():
        state = load(target, torch.float32).state_dict()
        source = torch.tensor([i for i, _ in common])
        destination = torch.tensor([j for _, j in common])
        out = {}
        for key, value in state.items():
            if key in ("model.embed_tokens.weight", "lm_head.weight"):
                grown = torch.zeros(32768, value.shape[1])
                grown[destination] = value[source]
                value = grown
            out[key] = value.clone()
        write_model(directory, ModelShape(rows=32768, hidden=48, tied=True, seed=31), tokenizer_json=mistral_json("v3"),
                    tokenizer_config=MISTRAL_CONFIG, generation_config=MISTRAL_GENERATION, state_dict=out)
    return target, directory


def test_the_targets_own_network_reindexed_is_accepted_through_translation(reindexed):
    target_path, draft_path = reindexed
    comparison = compare(str(target_path), str(draft_path))
    assert comparison.verdict.value == "incompatible"  # every id moved by 768
    translation = comparison.translation
    assert translation.shared_tokens >= 31_997  # every regular v1 token
    target, draft = load(target_path), load(draft_path)
    tokenizer = comparison.target.source.tokenizer
    prompts = [tokenizer.encode(text).ids for text in TEXTS]
    expected = [reference(target, p, 24) for p in prompts]
    result = generate(target, prompts, DecodeOptions(k=4, max_new_tokens=24), draft=draft,
                      translator=translator_for(comparison))
    assert [s.token_ids for s in result.sequences] == expected
    assert result.metrics.acceptance_rate >= 0.9, result.metrics.acceptance_rate


# --- sampling in batches ---------------------------------------------------------------------------------------


def byte_level_tokenizer(merges: list[tuple[str, str]], reverse_bytes: bool) -> str:
    """A byte-level BPE tokenizer: the 256 bytes (in GPT-2's alphabet, optionally in reverse id order), then one
    token per merge."""
    from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    alphabet = sorted(alphabet, reverse=reverse_bytes)
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tokenizer = Tokenizer(tm.BPE(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer.to_str()


SHARED_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n"), ("o", "n")]
TARGET_ONLY = [("e", "r"), ("Ġ", "a"), ("r", "e"), ("Ġ", "s")]
DRAFT_ONLY = [("o", "u"), ("Ġ", "w"), ("a", "t"), ("e", "d")]


@pytest.fixture(scope="module")
def small_translated_pair(tmp_path_factory):
    """Two byte-level tokenizers of about 266 tokens with different ids for every byte and some merges only one
    side has; a target, and a draft made from it: re-indexed by bytes, then perturbed."""
    from vocabcheck.translation import vocab_bytes  # noqa: F401  (the package under test must import)

    root = tmp_path_factory.mktemp("translated")
    target_json = byte_level_tokenizer(SHARED_MERGES + TARGET_ONLY, reverse_bytes=False)
    draft_json = byte_level_tokenizer(SHARED_MERGES + DRAFT_ONLY, reverse_bytes=True)
    config, generation = {"eos_token": None, "bos_token": None}, {"bos_token_id": None, "eos_token_id": None}
    t_vocab = json.loads(target_json)["model"]["vocab"]
    d_vocab = json.loads(draft_json)["model"]["vocab"]
    target_dir = write_model(root / "target", ModelShape(rows=len(t_vocab), hidden=16, layers=1, heads=2,
                                                          kv_heads=1, intermediate=32, tied=False, seed=41),
                             tokenizer_json=target_json, tokenizer_config=config, generation_config=generation)
    state = load(target_dir, torch.float32).state_dict()
    generator = torch.Generator().manual_seed(42)
    out = {}
    for key, value in state.items():
        if key in ("model.embed_tokens.weight", "lm_head.weight"):
            grown = torch.randn(len(d_vocab), value.shape[1], generator=generator) * value.std()
            for token, i in d_vocab.items():
                if token in t_vocab:
                    grown[i] = value[t_vocab[token]]
            value = grown
        out[key] = value + 0.3 * value.std() * torch.randn(value.shape, generator=generator)
    draft_dir = write_model(root / "draft", ModelShape(rows=len(d_vocab), hidden=16, layers=1, heads=2, kv_heads=1,
                                                        intermediate=32, tied=False, seed=43),
                            tokenizer_json=draft_json, tokenizer_config=config, generation_config=generation,
                            state_dict=out)
    return target_dir, draft_dir


def test_sampled_translated_output_in_a_batch_follows_the_target_distribution(small_translated_pair):
    """4,000 rows sampled in one batch, each with its own re-encoding state, against the exact warped target
    distribution: the chi-square statistic stays below the 99.9th percentile (fixed seed)."""
    from scipy.stats import chi2

    target_dir, draft_dir = small_translated_pair
    comparison = compare(str(target_dir), str(draft_dir))
    translation = comparison.translation
    assert translation.translatable and 256 <= translation.shared_tokens < comparison.target.tokenizer.size
    target, draft = load(target_dir, torch.float32), load(draft_dir, torch.float32)
    sampling = Sampling(temperature=1.3, top_k=6)
    prompt = comparison.target.source.tokenizer.encode(" the rain in the").ids
    expected = exact_distribution(target, prompt, 3, sampling)
    n = 4000
    result = generate(target, [prompt] * n, DecodeOptions(k=2, max_new_tokens=3, sampling=sampling, seed=99),
                      draft=draft, translator=translator_for(comparison))
    counts: dict[tuple[int, ...], int] = {}
    for sequence in result.sequences:
        counts[sequence.token_ids] = counts.get(sequence.token_ids, 0) + 1
    statistic, dof = chi_square(counts, expected, n)
    assert 0 < result.metrics.accepted < result.metrics.drafted
    assert statistic < chi2.ppf(0.999, dof), (statistic, dof)


# --- the command line ------------------------------------------------------------------------------------------



def test_run_translate_from_the_command_line(cli, qwen_mistral):
    target, draft = qwen_mistral
    code, out, err = cli("run", target, draft, "--prompt", "hello world", "--max-new-tokens", 5)
    assert code == 1 and "--translate runs it through their shared tokens" in err.strip().splitlines()[-1]
    code, out, err = cli("run", target, draft, "--translate", "--prompt", "hello world", "--prompt", "日本語",
                         "--max-new-tokens", 6, "--batch-size", 2, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["metrics"]["translation"]["reencodings"] >= 0
    code, plain, _ = cli("run", target, "--method", "none", "--prompt", "hello world", "--prompt", "日本語",
                         "--max-new-tokens", 6, "--json")
    assert [s["token_ids"] for s in document["sequences"]] == [s["token_ids"] for s in json.loads(plain)["sequences"]]
