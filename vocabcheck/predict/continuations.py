"""The target's sequences the predictions are made over: taken from the prompt file where its JSONL lines carry a
``response`` (recorded traffic: no decoding at all), or generated once by the target alone — greedy, or sampled at a
temperature. Speculative decoding emits the target's own sequences either way, so these are what `run` would emit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..decode.load.loading import Prompt
from ..decode.options import DecodeOptions
from ..decode.sampling import Sampling
from ..errors import VocabcheckError
from ..methods import Method
from .teacher import Chain


@dataclass(frozen=True)
class Continuations:
    """One chain per prompt and each row's budget (``max_new_tokens``, or a recorded response's own length)."""

    chains: tuple[Chain, ...]
    budgets: tuple[int, ...]
    recorded: bool

    @property
    def tokens(self) -> int:
        return sum(len(c.tokens) for c in self.chains)


def recorded(session, prompts: Sequence[Prompt], prompt_ids: Sequence[Sequence[int]],
             options: DecodeOptions) -> Continuations | None:
    """The prompt file's responses in the target's tokens, or None without any: each as far as the decoder would
    have gone (``max_new_tokens``, and its first eos id unless eos is ignored). A response that ends at an eos id has
    the usual budget; one that ends without has its own length as its budget."""
    given = [p.response is not None for p in prompts]
    if not any(given):
        return None
    if not all(given):
        raise VocabcheckError("either every prompt carries a 'response' (recorded traffic) or none does; "
                              f"{given.count(False)} of {len(given)} have none")
    tokenizer = session.target_profile.source.tokenizer
    eos = frozenset(() if options.ignore_eos else session.eos_ids)
    chains, budgets = [], []
    for number, (prompt, ids) in enumerate(zip(prompts, prompt_ids), start=1):
        tokens = tokenizer.encode(prompt.response, add_special_tokens=False).ids[:options.max_new_tokens]
        if not tokens:
            raise VocabcheckError(f"prompt {number}: its 'response' encodes to no tokens")
        end = next((i + 1 for i, token in enumerate(tokens) if token in eos), None)
        chains.append(Chain(tuple(ids), tuple(tokens[:end])))
        budgets.append(options.max_new_tokens if end is not None else len(tokens))
    return Continuations(tuple(chains), tuple(budgets), recorded=True)


def generated(session, prompt_ids: Sequence[Sequence[int]], options: DecodeOptions, sampling: Sampling,
              batch_size: int) -> Continuations:
    """The target alone (plain decoding, ``batch_size`` prompts at a time) after each prompt."""
    plain = replace(options, method=Method.NONE, sampling=sampling)
    chains = []
    for begin in range(0, len(prompt_ids), batch_size):
        generation = session.generate_ids(prompt_ids[begin:begin + batch_size], plain)
        if generation.interrupted:
            raise KeyboardInterrupt
        chains += [Chain(tuple(s.prompt_ids), tuple(s.token_ids)) for s in generation.sequences]
    return Continuations(tuple(chains), tuple(options.max_new_tokens for _ in chains), recorded=False)


def cycled(sequences: Continuations, count: int) -> Continuations:
    """The sequences repeated in order up to ``count`` rows: what `bench` runs where it cycles its prompts to fill
    a batch (:func:`vocabcheck.bench.run._batches`)."""
    picks = [i % len(sequences.chains) for i in range(count)]
    return Continuations(tuple(sequences.chains[i] for i in picks), tuple(sequences.budgets[i] for i in picks),
                         sequences.recorded)
