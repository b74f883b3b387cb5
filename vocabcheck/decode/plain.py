"""Plain decoding of a model the speculative engine cannot drive: recurrent and hybrid models (Mamba, linear
attention) keep state in their own cache classes, which cannot be rolled back and take other arguments. They run
through transformers' own ``generate``, one prompt at a time (no padding enters a recurrent state), with the same
options, eos handling, streaming and metrics as the engine's plain decoding: each token after the first counts as
one verification that proposed nothing, so ``generated = first tokens + verifications + accepted`` holds here too.

An exception raised inside ``generate`` is the model's (transformers' code running it), reported as one line
(:class:`vocabcheck.errors.ModelFailure`, exit code 2); one raised by the caller's own ``on_tokens`` passes
through unchanged."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from ..errors import ModelFailure, exception_line
from ..methods import Method
from .metrics import Metrics, RowMetrics
from .options import DecodeOptions
from .result import GeneratedSequence, Generation


class _Streamer:
    """transformers' streamer protocol: ``put`` gets the prompt first, then each new token."""

    def __init__(self, row: int, metrics: RowMetrics, start: float, on_tokens):
        self.row, self.metrics, self.start, self.on_tokens = row, metrics, start, on_tokens
        self.prompt_seen = False
        self.caller_failure: BaseException | None = None  # raised by on_tokens: the caller's, not the model's

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        tokens = value.reshape(-1).tolist()
        at = time.perf_counter() - self.start
        for _ in tokens:
            if self.metrics.generated == 0:
                self.metrics.record_first(at)
            else:
                self.metrics.record_step(0, 0, 1, at, 1)  # one forward, nothing proposed: a verification of nothing
        if self.on_tokens is not None:
            try:
                self.on_tokens(self.row, tokens)
            except BaseException as exc:
                self.caller_failure = exc
                raise

    def end(self) -> None:
        pass


def generate_plain(model, prompts: Sequence[Sequence[int]], options: DecodeOptions, eos_ids: Sequence[int],
                   on_tokens=None):
    device = next(model.parameters()).device
    eos = [] if options.ignore_eos else list(eos_ids)
    metrics = Metrics(method=Method.NONE, k=0, batch_size=1)
    sequences, interrupted, start = [], False, time.perf_counter()
    torch.manual_seed(options.seed)
    config = _generation_config(options, eos)
    for row, prompt in enumerate(prompts):
        metrics.rows.append(RowMetrics())
        streamer = _Streamer(row, metrics.rows[-1], start, on_tokens)
        try:
            with torch.inference_mode():
                out = model.generate(torch.tensor([list(prompt)], device=device), generation_config=config,
                                     streamer=streamer,
                                     attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=device))
        except KeyboardInterrupt:
            interrupted = True
            break
        except Exception as exc:
            if exc is streamer.caller_failure:
                raise
            raise ModelFailure(f"transformers cannot run this model ({getattr(model.config, 'model_type', '?')}): "
                               f"{exception_line(exc)}") from exc
        tokens = tuple(out[0, len(prompt):].tolist())
        finish = "eos" if tokens and tokens[-1] in eos else "length"
        sequences.append(GeneratedSequence(tuple(prompt), tokens, finish))
    metrics.total_s = time.perf_counter() - start
    metrics.verify_passes = metrics.steps  # one forward per token after the first
    metrics.ttft_s = metrics.prefill_s = metrics.rows[0].first_at if metrics.rows else 0.0
    return Generation(sequences=tuple(sequences), metrics=metrics, interrupted=interrupted)


def _generation_config(options: DecodeOptions, eos: list[int]):
    """Exactly the options' decoding, none of the model's own generation defaults (penalties, other eos ids)."""
    from transformers import GenerationConfig

    sampling = options.sampling
    warping = {} if sampling.greedy else {"temperature": sampling.temperature, "top_k": sampling.top_k,
                                          "top_p": sampling.top_p}
    return GenerationConfig(max_new_tokens=options.max_new_tokens, do_sample=not sampling.greedy,
                            eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0, **warping)
