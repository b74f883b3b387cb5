"""How a draft's vocabulary meets the target's: the draft's probabilities as a distribution over the target's rows,
and target ids as the draft's input ids.

:class:`PaddedMapping` is the pair's :class:`vocabcheck.verdict.Alignment` as tensors (one tokenizer, rows padded or
cut): the draft's non-shared rows are dropped, then the vector is padded with zero rows or cut to the target's rows;
target ids beyond the draft's rows reach it as ``draft_substitute_id``. Proposals are drawn from that one mapped
distribution and acceptance divides by it, so the output stays the target's own.
"""

from __future__ import annotations

import torch

from ..verdict import Alignment
from .sampling import pick_greedy


class PaddedMapping:
    """The alignment as tensors: which draft rows keep their probability, and how target ids reach the draft."""

    def __init__(self, alignment: Alignment, draft, device: torch.device):
        self.target_rows = alignment.target_rows
        draft_rows = draft.get_output_embeddings().weight.shape[0]
        if draft_rows != alignment.draft_rows:
            raise ValueError(f"the draft model has {draft_rows} output rows but the alignment says "
                             f"{alignment.draft_rows}")
        keep = alignment.draft_keep_ranges()
        if not keep:
            raise ValueError("the draft shares no ids with the target: nothing it proposes could be accepted")
        self.usable = min(alignment.draft_rows, alignment.target_rows)  # "cut": rows beyond are never shared
        bias = torch.full((self.target_rows,), float("-inf"), device=device)  # "pad": the target's extra rows
        for a, b in keep:
            bias[a:b] = 0.0
        self.bias = bias
        lookup = torch.arange(max(alignment.target_rows, alignment.target_input_rows), device=device)
        for a, b in alignment.substituted_ids():
            lookup[a:b] = alignment.draft_substitute_id
        self.lookup = lookup

    def to_draft(self, ids: torch.Tensor) -> torch.Tensor:
        """Target ids as the draft's input ids."""
        return self.lookup[ids]

    def logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [..., draft_rows] as masked float32 logits over the target's rows [..., target_rows]."""
        x = draft_logits[..., : self.usable].float()
        if self.target_rows > self.usable:
            x = torch.nn.functional.pad(x, (0, self.target_rows - self.usable))
        return x + self.bias

    def greedy(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """The argmax of :meth:`logits` without building the padded vector (padded rows are -inf anyway); NO_TOKEN
        where they are not finite."""
        return pick_greedy(draft_logits[..., : self.usable] + self.bias[: self.usable])
