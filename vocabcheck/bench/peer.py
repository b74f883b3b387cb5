"""The peer: Hugging Face transformers' own assisted generation on the same pair and prompt, at batch 1.

- ``hf-none``: ``model.generate`` greedy, the peer's baseline;
- ``hf-ngram``: prompt lookup decoding, ``prompt_lookup_num_tokens=k``;
- ``hf-draft``: ``assistant_model=draft`` with ``num_assistant_tokens=k`` (constant schedule). transformers takes this
  path only when both configs have the same ``vocab_size``. A padded pair (the Qwen2.5 7B/0.5B case) is refused
  there and needs its different-tokenizer path (Universal Assisted Decoding: ``tokenizer=`` and
  ``assistant_tokenizer=``), which re-tokenizes text between the two models at every step; that is what runs, as
  ``hf-draft-uad``, and the note says so.
- a pair whose tokenizers differ (``--translate``): ``hf-draft-uad`` when greedy, ``hf-draft-tli`` (token-level
  intersection, transformers' sampling path for different tokenizers) when sampling.

Each call generates exactly ``max_new_tokens`` tokens (eos ignored, as in vocabcheck's cells) with the plan's
sampling; greedy output is checked against plain decoding. tokens/s = generated tokens / wall time of the call,
prefill included, which is how vocabcheck's cells count it too.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence

from .plan import BenchPlan, Cell, Row


def measure_hf(session, prompt: Sequence[int], plan: BenchPlan, cells: dict[tuple[str, int], Cell],
               say: Callable[[str], None]) -> tuple[list[Row], str]:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    target = session.target_model
    sampling = plan.options.sampling
    ids = torch.tensor([list(prompt)], device=session.device)
    mask = torch.ones_like(ids)
    decoding = {"do_sample": False} if sampling.greedy else {
        "do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p}
    base_kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=plan.max_new_tokens,
                       min_new_tokens=plan.max_new_tokens, pad_token_id=0, **decoding)
    variants: dict[str, dict] = {"hf-none": {}, "hf-ngram": {"prompt_lookup_num_tokens": plan.k,
                                                             "max_matching_ngram_size": plan.options.ngram_max}}
    note = ""
    if session.draft_model is not None and "draft" in plan.methods:
        drafts, note = _draft_variants(session, plan)
        variants.update(drafts)
    def call(kwargs) -> tuple[float, tuple[int, ...]]:
        start = time.perf_counter()
        torch.manual_seed(plan.options.seed)
        with torch.inference_mode():
            out = target.generate(**base_kwargs, **kwargs)
        if session.device.type == "cuda":
            torch.cuda.synchronize(session.device)
        return time.perf_counter() - start, tuple(out[0, ids.shape[1]:].tolist())

    times: dict[str, list[float]] = {name: [] for name in variants}
    outputs: dict[str, tuple[int, ...]] = {}
    for _ in range(plan.warmup):
        for name, kwargs in variants.items():
            say(f"warm-up: transformers {name}")
            call(kwargs)
    for repeat in range(plan.repeat):
        names = list(variants)
        names = names[repeat % len(names):] + names[: repeat % len(names)]
        for name in names:
            say(f"repeat {repeat + 1}/{plan.repeat}: transformers {name}")
            seconds, tokens = call(variants[name])
            times[name].append(seconds)
            outputs[name] = tokens

    reference = cells.get(("none", 1))
    expected = reference.outputs[0][0] if reference is not None and reference.outputs else outputs["hf-none"]
    rows = []
    base_time = statistics.median(times["hf-none"])
    for name, values in times.items():
        median = statistics.median(values)
        tokens = len(outputs[name])
        rows.append(Row(method=name, batch_size=1, tpot_ms=1000.0 * median / max(tokens, 1),
                        tpot_spread_ms=(1000.0 * min(values) / max(tokens, 1), 1000.0 * max(values) / max(tokens, 1)),
                        tokens_per_s=tokens / median if median else 0.0, acceptance_rate=None,
                        mean_accepted_length=None, acceptance_by_position=(), speedup=base_time / median,
                        lossless=outputs[name] == expected if sampling.greedy else None,
                        note="wall time per generated token, prefill included"))
    return rows, note



def _draft_variants(session, plan: BenchPlan) -> tuple[dict[str, dict], str]:
    """transformers' assisted generation for the pair: its same-tokenizer path where it accepts the pair, else its
    different-tokenizer paths — Universal Assisted Decoding (greedy: text re-encoded at every step) or token-level
    intersection (sampling; batch 1 only)."""
    target, draft = session.target_model, session.draft_model
    draft.generation_config.num_assistant_tokens = plan.k
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    t_size, d_size = target.config.get_text_config().vocab_size, draft.config.get_text_config().vocab_size
    if session.translator is None and t_size == d_size:
        return {"hf-draft": {"assistant_model": draft}}, ""
    tokenizers = _hf_tokenizers(session)
    if not plan.options.sampling.greedy:
        # TLI prunes the assistant's lm_head in place: it gets a copy, and vocabcheck's cells keep the draft whole
        pruned = copy.deepcopy(draft)
        return {"hf-draft-tli": {"assistant_model": pruned, **tokenizers}}, (
            "transformers runs a pair with different tokenizers and sampling through token-level intersection "
            "(UniversalSpeculativeDecodingGenerator), at batch 1 only; hf-draft-tli measures that.")
    if session.translator is not None:
        return {"hf-draft-uad": {"assistant_model": draft, **tokenizers}}, (
            "transformers runs a pair with different tokenizers greedily through Universal Assisted Decoding "
            "(tokenizer= and assistant_tokenizer=: text re-encoded between the models at every step), at batch 1 "
            "only; hf-draft-uad measures that.")
    return {"hf-draft-uad": {"assistant_model": draft, **tokenizers}}, (
        f"transformers refuses assistant_model= for this pair (config vocab_size {t_size} vs {d_size}) and asks for "
        "its different-tokenizer path, Universal Assisted Decoding (tokenizer= and assistant_tokenizer=), which "
        "re-tokenizes text between the models at every step; hf-draft-uad measures that. `vocabcheck align` writes "
        "a draft with the target's rows that its same-tokenizer path accepts.")


def _hf_tokenizers(session) -> dict:
    from transformers import AutoTokenizer

    from ..decode.loading import model_directory

    return {"tokenizer": AutoTokenizer.from_pretrained(str(model_directory(session.target_profile))),
            "assistant_tokenizer": AutoTokenizer.from_pretrained(str(model_directory(session.draft_profile)))}
