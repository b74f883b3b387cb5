"""Which attention each layer of a model uses, whether its cache can be rolled back, and the masks the decoder builds.

Speculative decoding appends proposals to the KV cache and takes the rejected ones back. The decoder keeps one
full-length cache layer for every attention layer (``DynamicLayer``, which can be cropped at any length) and applies
each layer's attention pattern through the mask it builds itself, from every cache slot's *position*:

- a full-attention layer lets a query at position p see every real slot at a position <= p;
- a sliding-window layer of width w lets it see the real slots at positions p - w < position <= p (transformers'
  own rule, ``kv_idx > q_idx - sliding_window``);
- a chunked-attention layer of chunk c (Llama 4) lets it see the real slots at positions <= p in p's chunk,
  position // c == p // c (transformers' ``chunked_overlay``; its cache treats the chunk as a window, which it is
  not).

Counting positions rather than slots is what keeps a batch lossless: a row's verify chunk is left-padded to the
batch's widest row, and rows that reject different numbers of proposals keep the rejected slots as masked holes, so
slot indices drift away from positions. transformers' sliding-window caches count slots (a hole pushes a real token
out of the window) and refuse to crop once the window is full; the full cache plus a positional mask is exact in
both respects, for all-sliding models (Mistral v0.1, Phi-3) and alternating local/global ones (Gemma 2/3) alike.
The price is memory: sliding layers keep the whole context instead of the last w tokens, as full layers do anyway.

A model whose cache holds recurrent state (Mamba, linear attention, hybrid layers) cannot be rolled back by
cropping: the speculative methods refuse it with one line; plain decoding runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import UnsupportedModel

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"


@dataclass(frozen=True)
class AttentionLayout:
    """The attention type of each layer, the sliding window (in positions) of the sliding layers and the chunk of
    the chunked ones."""

    layer_types: tuple[str, ...]
    window: int | None
    chunk: int | None = None

    @property
    def sliding(self) -> bool:
        """Some layer sees less than every earlier position (a window or a chunk): the mask is always needed."""
        return SLIDING in self.layer_types or CHUNKED in self.layer_types

    @property
    def mixed(self) -> bool:
        return len(set(self.layer_types)) > 1

    def masks(self, slot_pos: torch.Tensor, slot_real: torch.Tensor, queries: int, dtype: torch.dtype):
        """Additive attention masks for the last ``queries`` slots: [B, 1, queries, S] (0 where a query may attend,
        the dtype's minimum elsewhere). One tensor where every layer has the same type, else one per type (the
        form transformers' models with mixed layers take)."""
        masks = {FULL: _allowed(slot_pos, slot_real, queries)}
        if SLIDING in self.layer_types:
            masks[SLIDING] = _allowed(slot_pos, slot_real, queries, window=self.window)
        if CHUNKED in self.layer_types:
            masks[CHUNKED] = _allowed(slot_pos, slot_real, queries, chunk=self.chunk)
        additive = {kind: _additive(allowed, dtype) for kind, allowed in masks.items()}
        if not self.mixed:
            return additive[self.layer_types[0]]
        return additive


def _allowed(slot_pos: torch.Tensor, slot_real: torch.Tensor, queries: int, *, window: int | None = None,
             chunk: int | None = None) -> torch.Tensor:
    """[B, queries, S] booleans: real slots at positions the query may see. A padding query sees itself only, so
    that no row of the softmax is empty."""
    query_pos = slot_pos[:, -queries:, None]  # [B, q, 1]
    keys = slot_pos[:, None, :]  # [B, 1, S]
    allowed = slot_real[:, None, :] & (keys <= query_pos)
    if window is not None:
        allowed &= keys > query_pos - window
    if chunk is not None:
        allowed &= torch.div(keys, chunk, rounding_mode="floor") == torch.div(query_pos, chunk, rounding_mode="floor")
    slots = slot_pos.shape[1]
    own = torch.arange(slots, device=slot_pos.device)[None, :] == \
        torch.arange(slots - queries, slots, device=slot_pos.device)[:, None]  # [q, S]
    return allowed | own[None]


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def attention_layout(model) -> AttentionLayout:
    """The layout of a loaded model; raises :class:`UnsupportedModel` where its cache cannot be rolled back."""
    problem = rollback_problem(model.config, type(model))
    if problem is not None:
        raise UnsupportedModel(problem)
    return _layout(model.config)


def rollback_problem(config, model_class: type | None = None) -> str | None:
    """Why speculative decoding cannot roll back this model's cache (None when it can): recurrent or linear-attention
    state, or layer types the decoder cannot mask by position. Needs only the config (and the model class)."""
    from transformers import cache_utils
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    name = getattr(config, "model_type", "?")
    consequence = "speculative decoding (draft and ngram) cannot run it losslessly, plain decoding (--method none) can"
    # transformers before 5.25 marks recurrent models on the class; from 5.25 on they build linear-attention layers
    if model_class is not None and getattr(model_class, "_is_stateful", False):
        return f"{name} keeps recurrent state that cannot be rolled back to drop rejected proposals; {consequence}"
    try:
        layers = DynamicCache(config=config).layers
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return f"{name}: cannot tell its attention layout from its config ({exc})"
    recurrent_layer = getattr(cache_utils, "LinearAttentionCacheLayerMixin", ())
    recurrent = sorted({type(layer).__name__ for layer in layers if isinstance(layer, recurrent_layer)})
    if recurrent:
        return (f"{name} keeps recurrent state ({', '.join(recurrent)}) that cannot be rolled back to drop rejected "
                f"proposals; {consequence}")
    odd = sorted({type(layer).__name__ for layer in layers} - {"DynamicLayer", "DynamicSlidingWindowLayer"})
    if odd:
        return (f"{name} has cache layers that cannot be rolled back to drop rejected proposals ({', '.join(odd)}); "
                f"{consequence}")
    for kind, word in ((SLIDING, "sliding-window layers of different widths"), (CHUNKED, "chunks of different sizes")):
        widths = {width for width, of in _limited(config, layers) if of == kind}
        if len(widths) > 1:
            return f"{name} has {word} ({sorted(widths)}); vocabcheck masks one width of each kind"
    assert all(isinstance(layer, DynamicLayer) for layer in layers)
    return None


def _limited(config, layers) -> list[tuple[int, str]]:
    """(width, kind) of every cache layer that sees less than the whole context: transformers gives chunked layers
    its sliding-window cache class, with the chunk as the window; the config's layer types tell them apart."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    named = getattr(config.get_text_config(), "layer_types", None) or ()
    return [(layer.sliding_window, CHUNKED if i < len(named) and named[i] == CHUNKED else SLIDING)
            for i, layer in enumerate(layers) if isinstance(layer, DynamicSlidingWindowLayer)]


def _layout(config) -> AttentionLayout:
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    layers = DynamicCache(config=config).layers
    limited = iter(_limited(config, layers))
    types = tuple(next(limited)[1] if isinstance(layer, DynamicSlidingWindowLayer) else FULL for layer in layers)
    widths = {kind: width for width, kind in _limited(config, layers)}
    return AttentionLayout(layer_types=types, window=widths.get(SLIDING), chunk=widths.get(CHUNKED))
