"""The decoder is lossless: greedy output is the target's own greedy output, token for token, and sampled output
follows the target's warped distribution; across padded rows in both directions, in batches and alone."""

from __future__ import annotations

import json
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.support.distributions import chi_square, exact_distribution
from vocabcheck import compare
from vocabcheck.decode import DecodeOptions, Sampling, generate
from vocabcheck.decode.ngram import NgramIndex
from vocabcheck.decode.sampling import acceptance_probability, residual, warp
from vocabcheck.decode.cpu.head import RACE_AFTER, RACE_ROWS, TunedHead, candidates, cpu_head, onednn_available
from vocabcheck.decode.state import KVState
from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import ModelShape, write_model

PROMPTS = ["def fibonacci(n):\n    return", "The quick brown fox", "日本語のテキスト：こんにちは、世界！ and some English"]


def load(path, dtype=torch.float64):
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


def derived(models, name, source, rows, *, tied=False, noise=0.0, seed=0, edit=None):
    """A checkpoint made from ``source``'s weights with ``rows`` embedding rows (cut or zero-padded), optionally
    perturbed: a draft whose proposals the target accepts often but not always."""
    directory = models.root / name
    if directory.is_dir():
        return directory
    state = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).state_dict()
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in state.items():
        value = value.clone()
        if key in ("model.embed_tokens.weight", "lm_head.weight"):
            if rows <= value.shape[0]:
                value = value[:rows].clone()
            else:
                value = torch.cat([value, torch.zeros(rows - value.shape[0], value.shape[1])])
        if noise:
            value += noise * value.std() * torch.randn(value.shape, generator=generator)
        out[key] = value
    if tied:
        out.pop("lm_head.weight")
    if edit is not None:
        edit(out)
    config = json.loads((source / "config.json").read_text())
    shape = ModelShape(rows=rows, hidden=config["hidden_size"], layers=config["num_hidden_layers"],
                       heads=config["num_attention_heads"], kv_heads=config["num_key_value_heads"],
                       intermediate=config["intermediate_size"], tied=tied)
    return write_model(directory, shape, tokenizer_json=models.qwen_tokenizer,
                       tokenizer_config=qwen.tokenizer_config(), generation_config=qwen.generation_config(),
                       state_dict=out)


def zero_padding_rows(state):
    """Like a trained model, never pick a padding row: their lm_head rows give logit 0, below the real maximum."""
    state["lm_head.weight"][qwen.TOKENIZER_IDS:] = 0.0


@pytest.fixture(scope="module")
def pair(models, qwen_pair):
    """target: 152,064 rows; drafts with 151,936 rows made from it (exact and noisy) and a random one."""
    target = derived(models, "target-152064-unused-padding", qwen_pair[0], qwen.ROWS_LARGE, edit=zero_padding_rows)
    return {
        "target": target,
        "exact": derived(models, "draft-from-target-151936", target, qwen.ROWS_SMALL),
        "noisy": derived(models, "draft-noisy-151936", target, qwen.ROWS_SMALL, noise=0.05, seed=3),
        "random": qwen_pair[1],
        "small_target": derived(models, "target-151936-from-152064", target, qwen.ROWS_SMALL),
    }


@pytest.fixture(scope="module")
def prompt_ids(pair):
    tokenizer = compare(str(pair["target"]), str(pair["target"])).target.source.tokenizer
    return [tokenizer.encode(text).ids for text in PROMPTS]


def reference(model, prompt, n):
    """What the target alone produces greedily: transformers' own generate."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                         pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


@pytest.mark.parametrize("draft_name", ["exact", "noisy", "random"])
def test_greedy_equals_target_alone_for_k_1_4_8(pair, prompt_ids, draft_name):
    comparison = compare(str(pair["target"]), str(pair[draft_name]))
    assert comparison.alignment.mapping == "pad"
    target, draft = load(pair["target"]), load(pair[draft_name])
    tokens = 12 if draft_name == "random" else 24  # a random draft is never accepted: one token per step, slow
    expected = [reference(target, p, tokens) for p in prompt_ids]
    for k in (1, 4, 8):
        for i, prompt in enumerate(prompt_ids):
            alone = generate(target, [prompt], DecodeOptions(k=k, max_new_tokens=tokens), draft=draft,
                             alignment=comparison.alignment)
            assert alone.sequences[0].token_ids == expected[i], (draft_name, k, i)
        batched = generate(target, prompt_ids, DecodeOptions(k=k, max_new_tokens=tokens), draft=draft,
                           alignment=comparison.alignment)
        assert [s.token_ids for s in batched.sequences] == expected, (draft_name, k)
        if draft_name == "exact":
            # the draft is the target cut to 151,936 rows: it proposes what the target picks
            assert batched.metrics.acceptance_rate == 1.0
        if draft_name == "noisy" and k == 4:
            assert 0.1 < batched.metrics.acceptance_rate < 0.95  # both accept and reject paths are exercised


def test_greedy_with_a_draft_larger_than_the_target(pair, prompt_ids):
    """Cut direction: the draft's 152,064 rows are cut to the target's 151,936."""
    comparison = compare(str(pair["small_target"]), str(pair["target"]))
    assert comparison.alignment.mapping == "cut"
    target, draft = load(pair["small_target"]), load(pair["target"])
    expected = [reference(target, p, 20) for p in prompt_ids]
    result = generate(target, prompt_ids, DecodeOptions(k=4, max_new_tokens=20), draft=draft,
                      alignment=comparison.alignment)
    assert [s.token_ids for s in result.sequences] == expected
    assert result.metrics.acceptance_rate == 1.0


def test_a_target_only_id_reaching_the_draft_does_not_crash(models, pair, prompt_ids):
    """A target whose lm_head makes it emit id 152,000 — a row the draft does not have — where it would emit
    its favourite token: the draft is fed its substitute id, and the output is still the target's."""
    target = load(pair["target"])
    favourite = reference(target, prompt_ids[0], 8)[0]

    def boost(state):
        state["lm_head.weight"][152000] = 3.0 * state["lm_head.weight"][favourite]

    edited_path = derived(models, "target-emits-152000", pair["target"], qwen.ROWS_LARGE, edit=boost)
    comparison = compare(str(edited_path), str(pair["exact"]))
    assert comparison.alignment.draft_substitute_id == qwen.ENDOFTEXT
    edited = load(edited_path)
    expected = [reference(edited, p, 16) for p in prompt_ids]
    assert any(152000 in e for e in expected), "the edited target must emit the draft-less id"
    for k in (1, 4):
        result = generate(edited, prompt_ids, DecodeOptions(k=k, max_new_tokens=16), draft=load(pair["exact"]),
                          alignment=comparison.alignment)
        assert [s.token_ids for s in result.sequences] == expected


def test_ngram_and_plain_decoding_are_the_target_alone(pair, prompt_ids):
    target = load(pair["target"])
    repeating = prompt_ids[0] * 3  # something to look up
    prompts = prompt_ids + [repeating]
    expected = [reference(target, p, 20) for p in prompts]
    for method in ("none", "ngram"):
        result = generate(target, prompts, DecodeOptions(method=method, k=4, max_new_tokens=20))
        assert [s.token_ids for s in result.sequences] == expected, method
    ngram = generate(target, [repeating], DecodeOptions(method="ngram", k=4, max_new_tokens=20))
    assert ngram.metrics.drafted > 0


def test_each_sequence_stops_on_its_own_eos(pair, prompt_ids):
    target = load(pair["target"])
    draft = load(pair["exact"])
    comparison = compare(str(pair["target"]), str(pair["exact"]))
    full = [reference(target, p, 16) for p in prompt_ids]
    stop = full[0][5]  # the 6th token of the first prompt's output becomes an eos id
    result = generate(target, prompt_ids, DecodeOptions(k=4, max_new_tokens=16), draft=draft,
                      alignment=comparison.alignment, eos_ids=[stop])
    for sequence, tokens in zip(result.sequences, full):
        if stop in tokens:
            cut = tokens.index(stop) + 1
            assert sequence.token_ids == tokens[:cut] and sequence.finish_reason == "eos"
        else:
            assert sequence.token_ids == tokens and sequence.finish_reason == "length"
    assert result.sequences[0].token_ids == full[0][:6]


def test_kv_rollback_matches_a_fresh_forward(pair, prompt_ids):
    """Prefill once, append a chunk, roll back its last tokens, append others: the logits are those of a fresh
    forward over the kept tokens, and no rejected slot stays in the cache of a batch of one."""
    model = load(pair["target"])
    prompt = prompt_ids[0]
    state = KVState(model, 1, torch.device("cpu"))
    state.forward(torch.tensor([prompt]), keep=1)
    state.forward(torch.tensor([[11, 22, 33, 44]]), keep=4)
    state.rollback(torch.tensor([3]), [3])
    assert state.cache.get_seq_length() == len(prompt) + 1
    logits = state.forward(torch.tensor([[55, 66]]), keep=2)
    fresh = model(torch.tensor([prompt + [11, 55, 66]])).logits[:, -2:]
    assert torch.allclose(logits, fresh, atol=1e-9, rtol=0)


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


@needs_onednn
def test_every_cpu_head_kernel_gives_the_models_own_logits(pair, prompt_ids):
    """On the CPU the engine applies a float32 lm_head through whichever kernel was fastest (oneDNN, or MKL in
    either layout): every candidate gives the model's own logits to within 1e-6 (float32 rounding), for a plain
    step, a verify chunk and a long chunk, at batch 1 and 4; once a size's calls have timed the candidates, the tuned
    head keeps one kernel for it, so a repeated call gives the same bits."""
    assert onednn_available() and set(candidates()) == {"onednn", "mkl", "mkl-columns"}
    model = load(pair["target"], torch.float32)
    head = cpu_head(model)
    assert isinstance(head, TunedHead) and cpu_head(model) is head  # one per weight: tuned once per process
    prompt = (prompt_ids[2] + prompt_ids[0])[:24]
    for batch, keep in ((1, 1), (4, 1), (1, 5), (4, 5), (1, 20)):
        tokens = torch.tensor([prompt] * batch)
        state = KVState(model, batch, torch.device("cpu"))
        logits = state.forward(tokens, keep=keep)
        own = model(tokens, logits_to_keep=keep).logits
        assert logits.shape == own.shape == (batch, keep, qwen.ROWS_LARGE)
        assert (logits - own).abs().max() < 1e-6, (batch, keep, (logits - own).abs().max())  # logits of about 0.5
        assert torch.equal(logits.argmax(-1), own.argmax(-1))
        hidden = model.get_decoder()(tokens).last_hidden_state[:, -keep:]
        for name, kernel in candidates().items():
            assert (kernel(hidden, head.weight) - own).abs().max() < 1e-6, (name, batch, keep)
        # a small size's first calls run oneDNN untimed, the next ones time the candidates, then it is decided (or
        # an earlier test decided it); a large one is never timed
        for _ in range(RACE_AFTER - 1 + len(candidates()) * TunedHead.rounds):
            if TunedHead.bucket(batch * keep) in head.choice:
                break
            assert (head(hidden) - own).abs().max() < 1e-6
        if batch * keep <= RACE_ROWS:
            assert head.choice[TunedHead.bucket(batch * keep)] in candidates()
        else:
            assert TunedHead.bucket(batch * keep) not in head.choice
        assert torch.equal(head(hidden), head(hidden))


@needs_onednn
def test_greedy_through_the_cpu_head_equals_target_alone(pair, prompt_ids):
    """Float32 speculation with both heads through the tuned CPU kernels is transformers' own greedy output
    (F.linear), alone and batched. The products differ by float32 rounding, so the test first checks that the
    reference has no near tie a rounding could flip: the top-2 logit margin is over 1e-5 at every step, ten times
    the largest difference between the kernels (under 1e-6: the test above)."""
    comparison = compare(str(pair["target"]), str(pair["noisy"]))
    target, draft = load(pair["target"], torch.float32), load(pair["noisy"], torch.float32)
    assert isinstance(cpu_head(target), TunedHead) and isinstance(cpu_head(draft), TunedHead)
    expected = []
    for prompt in prompt_ids:
        out = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                              pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        top2 = torch.stack(out.scores).topk(2, dim=-1).values
        assert (top2[..., 0] - top2[..., 1]).min() > 1e-5
        expected.append(tuple(out.sequences[0, len(prompt):].tolist()))
    for k in (1, 4, 8):
        batched = generate(target, prompt_ids, DecodeOptions(k=k, max_new_tokens=24), draft=draft,
                           alignment=comparison.alignment)
        assert [s.token_ids for s in batched.sequences] == expected, k
        alone = [generate(target, [p], DecodeOptions(k=k, max_new_tokens=24), draft=draft,
                          alignment=comparison.alignment)
                 for p in prompt_ids]
        assert [a.sequences[0].token_ids for a in alone] == expected, k
        assert 0.1 < batched.metrics.acceptance_rate < 0.95


def test_models_whose_logits_are_not_a_plain_float32_head_keep_their_own_forward(pair):
    """Gemma 2 soft-caps its logits; float64 and bfloat16 heads were not measured: none of them is replaced, and
    the engine's logits are the model's own, bit for bit."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    gemma = Gemma2ForCausalLM(Gemma2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                           final_logit_softcapping=2.0)).eval()
    assert cpu_head(gemma) is None
    tokens = torch.tensor([[1, 5, 9, 13]])
    logits = KVState(gemma, 1, torch.device("cpu")).forward(tokens, keep=4)
    assert torch.equal(logits, gemma(tokens).logits)
    assert logits.abs().max() <= 2.0  # the soft cap was applied
    target = load(pair["target"], torch.float64)
    assert cpu_head(target) is None
    tokens = torch.tensor([[11, 22, 33, 44]])
    logits = KVState(target, 1, torch.device("cpu")).forward(tokens, keep=2)
    assert torch.equal(logits, target(tokens, logits_to_keep=2).logits)
    assert cpu_head(load(pair["target"], torch.bfloat16)) is None


# --- the acceptance arithmetic, computed exactly -------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_acceptance_rule_reproduces_p_exactly(seed):
    generator = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(12, generator=generator, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(12, generator=generator, dtype=torch.float64) * 2, -1)
    q[3] = 0.0  # a token the draft never proposes
    q = q / q.sum()
    proposed = q > 0
    accept = torch.zeros_like(p)
    accept[proposed] = acceptance_probability(p[proposed], q[proposed])
    rejected = 1.0 - (q * accept).sum()
    output = q * accept + rejected * residual(p, q)
    assert torch.allclose(output, p, atol=1e-15, rtol=0)


def test_point_mass_proposals_reproduce_p_exactly():
    """n-gram proposals: q is a point mass on the proposed token."""
    p = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)
    for x in range(4):
        q = torch.nn.functional.one_hot(torch.tensor(x), 4).double()
        a = acceptance_probability(p[x], q[x])
        output = q * a + (1 - a) * residual(p, q)
        assert torch.allclose(output, p, atol=1e-15, rtol=0)


def test_warp_applies_temperature_top_k_and_top_p():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    assert torch.allclose(warp(logits, Sampling(temperature=1.0)), torch.tensor([0.4, 0.3, 0.2, 0.1]))
    top2 = warp(logits, Sampling(temperature=1.0, top_k=2))
    assert torch.allclose(top2, torch.tensor([4 / 7, 3 / 7, 0, 0]))
    nucleus = warp(logits, Sampling(temperature=1.0, top_p=0.75))  # 0.4 + 0.3 < 0.75: the third token stays
    assert torch.allclose(nucleus, torch.tensor([4 / 9, 3 / 9, 2 / 9, 0]))
    hot = warp(logits, Sampling(temperature=0.5))
    assert torch.allclose(hot, torch.softmax(logits / 0.5, -1))


# --- sampled output follows the target's distribution -------------------------------------------------------


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory):
    """A target with 512 rows and a noisy draft made from it with 500 rows, over one 480-token WordLevel
    tokenizer: small enough to sample thousands of sequences, padded like the real pairs."""
    from tokenizers import Tokenizer, models as tm, pre_tokenizers

    root = tmp_path_factory.mktemp("small-pair")
    vocab = {f"w{i}": i for i in range(480)}
    tokenizer = Tokenizer(tm.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    text = tokenizer.to_str()
    config = {"eos_token": None, "bos_token": None}
    generation = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    target_dir = write_model(root / "target", ModelShape(rows=512, hidden=16, layers=1, heads=2, kv_heads=1,
                                                          intermediate=32, tied=False, seed=5),
                             tokenizer_json=text, tokenizer_config=config, generation_config=generation)
    state = AutoModelForCausalLM.from_pretrained(str(target_dir)).state_dict()
    generator = torch.Generator().manual_seed(9)
    draft_state = {}
    for key, value in state.items():
        value = value[:500].clone() if key in ("model.embed_tokens.weight", "lm_head.weight") else value.clone()
        draft_state[key] = value + 0.8 * value.std() * torch.randn(value.shape, generator=generator)
    draft_dir = write_model(root / "draft", ModelShape(rows=500, hidden=16, layers=1, heads=2, kv_heads=1,
                                                        intermediate=32, tied=False, seed=6),
                            tokenizer_json=text, tokenizer_config=config, generation_config=generation,
                            state_dict=draft_state)
    return target_dir, draft_dir


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_sampled_output_follows_the_target_distribution(small_pair, method):
    """4,000 sampled 3-token continuations against the exact warped target distribution. Threshold: the chi-square
    statistic must stay below the 99.9th percentile for its degrees of freedom (fixed seed, so the run is
    deterministic; a lossy rule — e.g. accepting every proposal — fails it by orders of magnitude)."""
    from scipy.stats import chi2

    target_dir, draft_dir = small_pair
    comparison = compare(str(target_dir), str(draft_dir))
    assert comparison.alignment.mapping == "pad" and comparison.alignment.pad_rows == 12
    target = load(target_dir, torch.float32)
    draft = load(draft_dir, torch.float32)
    sampling = Sampling(temperature=1.3, top_k=4)
    prompt = [7, 100, 42]
    if method == "ngram":  # the prompt repeats itself with the target's likely continuation in between
        greedy = generate(target, [prompt], DecodeOptions(method="none", max_new_tokens=3)).sequences[0].token_ids
        prompt = prompt + list(greedy) + prompt
    expected = exact_distribution(target, prompt, 3, sampling)
    n = 4000
    result = generate(target, [prompt] * n, DecodeOptions(method=method, k=2, max_new_tokens=3, sampling=sampling,
                                                          seed=1234),
                      draft=draft if method == "draft" else None,
                      alignment=comparison.alignment if method == "draft" else None)
    counts: dict[tuple[int, ...], int] = {}
    for sequence in result.sequences:
        counts[sequence.token_ids] = counts.get(sequence.token_ids, 0) + 1
    statistic, dof = chi_square(counts, expected, n)
    assert result.metrics.accepted > 0 and result.metrics.accepted < result.metrics.drafted
    assert statistic < chi2.ppf(0.999, dof), (statistic, dof)


# --- n-gram index -----------------------------------------------------------------------------------------------


def brute_force(context, k, n_min, n_max):
    for n in range(min(n_max, len(context) - 1), n_min - 1, -1):
        pattern = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start:start + n] == pattern:
                return context[start + n:start + n + k]
    return []


def test_ngram_index_matches_a_brute_force_search():
    rng = random.Random(0)
    for trial in range(300):
        context = [rng.randrange(6) for _ in range(rng.randrange(1, 40))]
        n_min = rng.randrange(1, 3)
        n_max = n_min + rng.randrange(0, 3)
        index = NgramIndex(n_min, n_max)
        index.extend(context[: len(context) // 2])
        index.extend(context[len(context) // 2:])
        k = rng.randrange(1, 6)
        assert index.propose(k) == brute_force(context, k, n_min, n_max), (context, k, n_min, n_max)
