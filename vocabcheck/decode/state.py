"""One model's KV cache for a batch, with per-row bookkeeping so rows can advance by different amounts.

Rows share one transformers ``DynamicCache`` (prefill once, then only new tokens). Each forward call appends a chunk
of the same width to every row; a row that has fewer real tokens in that chunk is left-padded, and the padding slots
are masked out of attention. Position ids are per row (its count of real tokens), so a row's tokens see exactly the
positions they would see alone. Rolling back rejected proposals masks a row's trailing slots and crops the cache by
the number of slots every row rejected (``DynamicCache.crop``), so a batch of one never keeps a rejected slot.

On the CPU the output head is applied by :mod:`vocabcheck.decode.head` where it computes the same product faster than
the model's own ``lm_head`` call; the model's decoder still computes the hidden states.
"""

from __future__ import annotations

import torch

from .head import cpu_head


class KVState:
    def __init__(self, model, batch: int, device: torch.device):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.mask = torch.zeros(batch, 0, dtype=torch.long, device=device)  # 1 = a real token in that cache slot
        self.length = torch.zeros(batch, dtype=torch.long, device=device)  # real tokens per row = next position id
        self.head = cpu_head(model)
        self.decoder = model.get_decoder() if self.head is not None else None  # hidden states, for self.head

    @property
    def slots(self) -> int:
        return self.mask.shape[1]

    def forward(self, tokens: torch.Tensor, real: torch.Tensor, keep: int) -> torch.Tensor:
        """Append ``tokens`` [B, m] (``real`` marks non-padding slots) and return logits for the last ``keep``
        slots, [B, keep, V]."""
        real = real.long()
        positions = self.length[:, None] + (real.cumsum(-1) - 1).clamp(min=0)
        attention = torch.cat([self.mask, real], dim=1)
        if self.head is None:
            out = self.model(input_ids=tokens, attention_mask=attention, position_ids=positions, cache=self.cache,
                             use_cache=True, logits_to_keep=keep)
            logits = out.logits
        else:
            out = self.decoder(input_ids=tokens, attention_mask=attention, position_ids=positions, cache=self.cache,
                               use_cache=True)
            logits = self.head(out.last_hidden_state[:, -keep:])
        self.mask = attention
        self.length = self.length + real.sum(-1)
        return logits

    def drop_last(self, rejected: list[int]) -> None:
        """Forget each row's last ``rejected[row]`` slots (real tokens of the last chunk, counted on the host)."""
        common = min(rejected, default=0)
        if common:
            self.cache.crop(-common)
            self.mask = self.mask[:, :-common]
        rest = [r - common for r in rejected]
        if any(rest):
            rest_t = torch.tensor(rest, device=self.mask.device)
            slots = torch.arange(self.slots, device=self.mask.device)
            self.mask = self.mask.masked_fill(slots[None, :] >= (self.slots - rest_t[:, None]), 0)
        if any(rejected):
            self.length = self.length - torch.tensor(rejected, device=self.length.device)

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]
        self.length = self.length[rows]
