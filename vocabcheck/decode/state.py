"""One model's KV cache for a batch, with per-row bookkeeping so rows can advance by different amounts.

Rows share one transformers ``DynamicCache`` of full-length layers (prefill once, then only new tokens). Each forward
appends a chunk of the same width to every row; a row with fewer real tokens in that chunk is left-padded. Every
cache slot records its row's position (the count of real tokens before it) and whether it is real, so a row's tokens
see exactly the positions and the neighbours they would see alone: the attention mask is built from those positions
(:mod:`vocabcheck.decode.load.layout`), which also applies sliding windows by position. Rolling back rejected proposals
crops the cache by the number of slots every row rejected and marks the rest of each row's rejected slots as holes,
so a batch of one never keeps a rejected slot.

Where no row has a padding slot or a hole and no layer slides, no mask is passed at all: the model's own causal mask
is exact and costs no host sync. All bookkeeping stays on the device; the host passes in what it already knows.

On the CPU the output head is applied by :mod:`vocabcheck.decode.cpu.head` where it computes the same product faster than
the model's own ``lm_head`` call; the model's decoder still computes the hidden states.
"""

from __future__ import annotations

import inspect

import torch

from .cpu.head import cpu_head
from .load.layout import AttentionLayout, attention_layout


class KVState:
    def __init__(self, model, batch: int, device: torch.device, layout: AttentionLayout | None = None,
                 fast_head: bool = True, hidden_from=None):
        """``fast_head=False`` keeps the model's own output head on the CPU too (the cache check: choosing the
        fastest head kernel times each new row count, which costs more than the check's forwards). ``hidden_from``, a
        module of the model (its decoder), gives that module's final hidden states instead of logits (the cache
        check, for a position-wise head)."""
        from transformers import DynamicCache

        _use_maskable_attention(model)
        self.model = model
        self.layout = layout or attention_layout(model)
        self.cache = DynamicCache()  # full-length layers everywhere: croppable; windows come from the mask
        self.real = torch.zeros(batch, 0, dtype=torch.bool, device=device)  # a real token in that cache slot
        self.pos = torch.zeros(batch, 0, dtype=torch.long, device=device)  # its position in its row
        self.length = torch.zeros(batch, dtype=torch.long, device=device)  # real tokens per row = next position
        self.ragged = False  # some slot is padding or a hole (known on the host: the host decides every padding)
        self.dtype = next(model.parameters()).dtype
        self.head = cpu_head(model) if fast_head and hidden_from is None else None
        # hidden states, for self.head or as the output
        self.decoder = model.get_decoder() if self.head is not None else hidden_from
        self._cache_arg = cache_keyword(self.decoder if self.decoder is not None else self.model)

    @property
    def slots(self) -> int:
        return self.real.shape[1]

    def forward(self, tokens: torch.Tensor, keep: int, real: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B, m] and return logits for the last ``keep`` slots, [B, keep, V] (hidden states
        [B, keep, H] where built with ``hidden_from``). ``real`` [B, m]
        marks non-padding slots; None means every slot is real."""
        width = tokens.shape[1]
        if real is None:
            positions = self.length[:, None] + torch.arange(width, device=tokens.device)
            real = torch.ones_like(tokens, dtype=torch.bool)
        else:
            real = real.bool()
            self.ragged = True
            positions = self.length[:, None] + (real.long().cumsum(-1) - 1).clamp(min=0)
        self.real = torch.cat([self.real, real], dim=1)
        self.pos = torch.cat([self.pos, positions], dim=1)
        self.length = self.length + real.sum(-1)
        mask = self.layout.masks(self.pos, self.real, width, self.dtype) if self.ragged or self.layout.sliding \
            else None
        return self._logits(tokens, positions, mask, keep)

    def _logits(self, tokens, positions, mask, keep: int) -> torch.Tensor:
        if self.decoder is None:
            return self.model(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True,
                              logits_to_keep=keep, **{self._cache_arg: self.cache}).logits
        out = self.decoder(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True,
                           **{self._cache_arg: self.cache})
        hidden = out.last_hidden_state[:, -keep:]
        return hidden if self.head is None else self.head(hidden)

    def rollback(self, rejected: torch.Tensor, rejected_host: list[int]) -> None:
        """Forget each row's last ``rejected[row]`` real slots (the same counts on the device and on the host): the
        slots every row rejected are cropped, the rest become holes."""
        common = min(rejected_host, default=0)
        if common:
            self.cache.crop(-common)
            self.real = self.real[:, :-common]
            self.pos = self.pos[:, :-common]
        if any(r > common for r in rejected_host):
            slots = torch.arange(self.slots, device=self.real.device)
            self.real = self.real & (slots[None, :] < (self.slots - (rejected - common))[:, None])
            self.ragged = True
        if any(rejected_host):
            self.length = self.length - rejected

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.real = self.real[rows]
        self.pos = self.pos[rows]
        self.length = self.length[rows]


def cache_keyword(module) -> str:
    """The keyword a model's ``forward`` takes its KV cache by: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before (5.18 to 5.23; vLLM 0.32 pins 5.19). An unknown keyword lands in ``**kwargs`` and
    is ignored, so the model would run without the cache; asking the signature is the one place that tells."""
    parameters = inspect.signature(module.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _use_maskable_attention(model) -> None:
    """The decoder's masks are additive tensors: sdpa and eager attention take them; other kernels (flash
    attention, flex attention) do not, so such a model is switched to sdpa."""
    if model.config._attn_implementation not in ("sdpa", "eager"):
        model.set_attn_implementation("sdpa")
