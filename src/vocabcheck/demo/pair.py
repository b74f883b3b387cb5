"""The demo pair: the real Qwen2.5 tokenizer, a target with 152,064 rows (untied, sharded) and a draft with 151,936
rows (tied), as Qwen2.5-7B and Qwen2.5-0.5B ship them, at a size a laptop CPU runs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import qwen
from .checkpoint import ModelShape, write_model

DEMO_VERSION = "1"
TARGET_SHAPE = ModelShape(rows=qwen.ROWS_LARGE, hidden=64, layers=4, heads=4, kv_heads=2, intermediate=128,
                          tied=False, shard_bytes=24_000_000, seed=7)
DRAFT_SHAPE = ModelShape(rows=qwen.ROWS_SMALL, hidden=32, layers=1, heads=4, kv_heads=2, intermediate=64,
                         tied=True, seed=11)


def cache_root() -> Path:
    """$VOCABCHECK_CACHE, else $XDG_CACHE_HOME/vocabcheck, else ~/.cache/vocabcheck."""
    if os.environ.get("VOCABCHECK_CACHE"):
        return Path(os.environ["VOCABCHECK_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vocabcheck"


@dataclass(frozen=True)
class DemoPair:
    target: Path
    draft: Path
    built: bool


def demo_pair(rebuild: bool = False, root: Path | None = None, progress=None) -> DemoPair:
    """The demo pair's two directories, built on first use (each appears whole or not at all)."""
    root = (root or cache_root()) / f"demo-v{DEMO_VERSION}"
    target, draft = root / "qwen2.5-shaped-target", root / "qwen2.5-shaped-draft"
    if not rebuild and target.is_dir() and draft.is_dir():
        return DemoPair(target, draft, built=False)
    say = progress or (lambda message: None)
    say("rebuilding the Qwen2.5 tokenizer from qwen.tiktoken")
    tokenizer = qwen.cached_tokenizer_json(root.parent / "tokenizers")
    say(f"writing the target ({TARGET_SHAPE.rows:,} rows, untied, sharded)")
    write_model(target, TARGET_SHAPE, tokenizer_json=tokenizer, tokenizer_config=qwen.tokenizer_config(),
                generation_config=qwen.generation_config())
    say(f"writing the draft ({DRAFT_SHAPE.rows:,} rows, tied)")
    write_model(draft, DRAFT_SHAPE, tokenizer_json=tokenizer, tokenizer_config=qwen.tokenizer_config(),
                generation_config=qwen.generation_config())
    return DemoPair(target, draft, built=True)
