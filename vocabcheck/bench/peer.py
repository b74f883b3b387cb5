"""The peer: Hugging Face transformers' own assisted generation on the same pair and prompts, at batch 1.

- ``hf-none``: ``model.generate`` greedy, the peer's baseline;
- ``hf-ngram``: prompt lookup decoding, ``prompt_lookup_num_tokens=k``;
- ``hf-draft``: ``assistant_model=draft`` with ``num_assistant_tokens=k`` (constant schedule). transformers takes this
  path only when both configs have the same ``vocab_size``. A padded pair (the Qwen2.5 7B/0.5B case) is refused
  there and needs its different-tokenizer path (Universal Assisted Decoding: ``tokenizer=`` and
  ``assistant_tokenizer=``), which re-tokenizes text between the two models at every step; that is what runs, as
  ``hf-draft-uad``, and the note says so.
- a pair whose tokenizers differ (``--translate``): ``hf-draft-uad`` when greedy, ``hf-draft-tli`` (token-level
  intersection, transformers' sampling path for different tokenizers) when sampling.
- ``k = "auto"``: the draft variant with transformers' own adaptive schedule (``"heuristic"``: two more tokens after
  a fully accepted step, one fewer otherwise), starting from 8; prompt lookup has no adaptive schedule and is not run
  at ``auto``.

Each cell is one of these variants at one k; it runs every prompt of the plan, one ``generate`` call per prompt
(transformers' assisted generation runs at batch 1 only). The stopping rule is vocabcheck's: ``eos_token_id=None``,
so eos is an ordinary token and every call generates exactly ``max_new_tokens`` tokens (transformers'
``min_new_tokens`` would instead mask eos and change the output). TPOT is vocabcheck's definition too: from the
first emitted token(s) to the last, over the tokens emitted after the first (prefill excluded), read from a
streamer; transformers' loop already reads its stop flag back from the device every step, so the streamer adds no
synchronisation. tokens/s = generated tokens / wall time of the calls, prefill included, as in vocabcheck's cells.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..methods import Method
from .plan import AUTO, BenchPlan, Failure, KValue

HEURISTIC_START = 8  # where transformers' adaptive schedule starts in an ``auto`` cell: vocabcheck's k_max


@dataclass(frozen=True)
class PeerVariant:
    """One way transformers generates, at one k: the keyword arguments of its ``generate``."""

    method: str
    k: KValue
    kwargs: dict = field(default_factory=dict)
    assistant: object | None = None  # the draft model whose generation_config sets k and the schedule


@dataclass(frozen=True)
class PeerRun:
    """One repeat of a peer's cell over every prompt: the same figures vocabcheck's Metrics give a cell."""

    tpot_ms: float
    tokens_per_s: float


class _Timestamps:
    """A transformers streamer that notes when tokens arrive: the first ``put`` is the prompt, the next ones the
    tokens each step emitted."""

    def __init__(self):
        self.puts: list[tuple[float, int]] = []
        self.prompt_seen = False

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.puts.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass

    def tpot_s(self) -> float:
        """(last arrival - first arrival) / tokens after the first arrival; NaN with a single arrival."""
        if len(self.puts) < 2:
            return float("nan")
        after = sum(n for _, n in self.puts[1:])
        return (self.puts[-1][0] - self.puts[0][0]) / after if after else float("nan")


def peer_variants(session, plan: BenchPlan) -> tuple[list[PeerVariant], str, list[Failure]]:
    """transformers' variants for the plan's methods and k values, a note on the path it takes for the draft, and
    the draft's cells as failures where setting that path up raised (a tokenizer transformers cannot load)."""
    variants = [PeerVariant("hf-none", 0)]
    fixed = [k for k in plan.ks if k != AUTO]
    if Method.NGRAM in plan.methods:
        variants += [PeerVariant("hf-ngram", k, {"prompt_lookup_num_tokens": k,
                                                 "max_matching_ngram_size": plan.options.ngram_max}) for k in fixed]
    note, failures = "", []
    if session.draft_model is not None and Method.DRAFT in plan.methods:
        try:
            name, kwargs, assistant, note = _draft_path(session, plan)
        except Exception as exc:  # transformers' failure, not ours: the draft's cells say why
            failures = [Failure("hf-draft", 1, k, one_line(exc)) for k in plan.ks]
        else:
            variants += [PeerVariant(name, k, kwargs, assistant) for k in plan.ks]
    return variants, note, failures


def one_line(exc: BaseException) -> str:
    """What a peer raised, as one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def generate_one(session, variant: PeerVariant, prompt: Sequence[int], plan: BenchPlan,
                 max_new_tokens: int) -> tuple[tuple[int, ...], float, float]:
    """One prompt through transformers: (tokens, TPOT seconds, wall seconds)."""
    import torch

    sampling = plan.options.sampling
    decoding = {"do_sample": False} if sampling.greedy else {
        "do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p}
    if variant.assistant is not None:
        config = variant.assistant.generation_config  # transformers' heuristic schedule writes k back here
        config.num_assistant_tokens = HEURISTIC_START if variant.k == AUTO else variant.k
        config.num_assistant_tokens_schedule = "heuristic" if variant.k == AUTO else "constant"
        config.assistant_confidence_threshold = 0.0
    ids = torch.tensor([list(prompt)], device=session.device)
    stamps = _Timestamps()
    start = time.perf_counter()
    torch.manual_seed(plan.options.seed)
    with torch.inference_mode():
        out = session.target_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                            max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0,
                                            streamer=stamps, **decoding, **variant.kwargs)
    if session.device.type == "cuda":
        torch.cuda.synchronize(session.device)
    return tuple(out[0, ids.shape[1]:].tolist()), stamps.tpot_s(), time.perf_counter() - start


def _draft_path(session, plan: BenchPlan) -> tuple[str, dict, object, str]:
    """transformers' assisted generation for the pair: its same-tokenizer path where it accepts the pair, else its
    different-tokenizer paths — Universal Assisted Decoding (greedy: text re-encoded at every step) or token-level
    intersection (sampling; batch 1 only)."""
    target, draft = session.target_model, session.draft_model
    t_size, d_size = target.config.get_text_config().vocab_size, draft.config.get_text_config().vocab_size
    if session.translator is None and t_size == d_size:
        return "hf-draft", {"assistant_model": draft}, draft, ""
    tokenizers = _hf_tokenizers(session)
    if not plan.options.sampling.greedy:
        # TLI prunes the assistant's lm_head in place: it gets a copy, and vocabcheck's cells keep the draft whole
        pruned = copy.deepcopy(draft)
        return "hf-draft-tli", {"assistant_model": pruned, **tokenizers}, pruned, (
            "transformers runs a pair with different tokenizers and sampling through token-level intersection "
            "(UniversalSpeculativeDecodingGenerator), at batch 1 only; hf-draft-tli measures that.")
    if session.translator is not None:
        return "hf-draft-uad", {"assistant_model": draft, **tokenizers}, draft, (
            "transformers runs a pair with different tokenizers greedily through Universal Assisted Decoding "
            "(tokenizer= and assistant_tokenizer=: text re-encoded between the models at every step), at batch 1 "
            "only; hf-draft-uad measures that.")
    return "hf-draft-uad", {"assistant_model": draft, **tokenizers}, draft, (
        f"transformers refuses assistant_model= for this pair (config vocab_size {t_size} vs {d_size}) and asks for "
        "its different-tokenizer path, Universal Assisted Decoding (tokenizer= and assistant_tokenizer=), which "
        "re-tokenizes text between the models at every step; hf-draft-uad measures that. `vocabcheck align` writes "
        "a draft with the target's rows that its same-tokenizer path accepts.")


def _hf_tokenizers(session) -> dict:
    from transformers import AutoTokenizer

    from ..decode.load.loading import model_directory

    return {"tokenizer": AutoTokenizer.from_pretrained(str(model_directory(session.target_profile))),
            "assistant_tokenizer": AutoTokenizer.from_pretrained(str(model_directory(session.draft_profile)))}
