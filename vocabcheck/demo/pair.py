"""The demo pair: the real Qwen2.5 tokenizer, a target with 152,064 rows (untied, sharded) and a draft with 151,936
rows, as Qwen2.5-7B and Qwen2.5-0.5B ship them, at a size a laptop CPU runs — trained on text that ships with Python
(see :mod:`vocabcheck.demo.train`), so that the draft earns its acceptance.

The target (hidden 256) is costlier than the draft (hidden 32) where it matters on a CPU: its lm_head is 156 MB of
float32 to read per step, the draft's 19 MB. Qwen2.5-0.5B ties its embeddings; this draft does not, because at hidden
32 a tied draft reproduced the target far less well (46% acceptance against 78% untied at hidden 64, with the same
training; measured while choosing these sizes)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import atomic
from ..machine import cache_root
from . import qwen
from .checkpoint import ModelShape, write_model
from .train import TrainPlan, train_pair

DEMO_VERSION = "5"
TARGET_SHAPE = ModelShape(rows=qwen.ROWS_LARGE, hidden=256, layers=2, heads=4, kv_heads=2, intermediate=512,
                          tied=False, shard_bytes=100_000_000, seed=7)
DRAFT_SHAPE = ModelShape(rows=qwen.ROWS_SMALL, hidden=32, layers=1, heads=1, kv_heads=1, intermediate=64,
                         tied=False, seed=11)
PLAN = TrainPlan()
RECIPE_FILE = "vocabcheck-demo.json"


@dataclass(frozen=True)
class DemoPair:
    target: Path
    draft: Path
    built: bool
    recipe: str = ""


def demo_pair(rebuild: bool = False, root: Path | None = None, progress=None) -> DemoPair:
    """The demo pair's two directories, built on first use (the pair appears whole or not at all)."""
    plan, target_shape, draft_shape = PLAN, TARGET_SHAPE, DRAFT_SHAPE
    root = (root or cache_root()) / f"demo-v{DEMO_VERSION}"
    target, draft = root / "qwen2.5-shaped-target", root / "qwen2.5-shaped-draft"
    if not rebuild and (root / RECIPE_FILE).is_file() and target.is_dir() and draft.is_dir():
        return DemoPair(target, draft, built=False, recipe=_recipe_text(root))
    say = progress or (lambda message: None)
    say("rebuilding the Qwen2.5 tokenizer from qwen.tiktoken")
    tokenizer_path = qwen.cached_tokenizer_json(root.parent / "tokenizers")
    from tokenizers import Tokenizer

    target_state, draft_state, report = train_pair(Tokenizer.from_file(str(tokenizer_path)), target_shape,
                                                   draft_shape, plan, progress=say)
    with atomic.directory(root) as tmp:
        say(f"writing the target ({target_shape.rows:,} rows, {'tied' if target_shape.tied else 'untied'}, sharded)")
        write_model(tmp / target.name, target_shape, tokenizer_json=tokenizer_path,
                    tokenizer_config=qwen.tokenizer_config(), generation_config=qwen.generation_config(),
                    state_dict=target_state)
        say(f"writing the draft ({draft_shape.rows:,} rows, {'tied' if draft_shape.tied else 'untied'})")
        write_model(tmp / draft.name, draft_shape, tokenizer_json=tokenizer_path,
                    tokenizer_config=qwen.tokenizer_config(), generation_config=qwen.generation_config(),
                    state_dict=draft_state)
        recipe = {
            "target": {"rows": target_shape.rows, "hidden": target_shape.hidden, "layers": target_shape.layers,
                       "tied": target_shape.tied},
            "draft": {"rows": draft_shape.rows, "hidden": draft_shape.hidden, "layers": draft_shape.layers,
                      "tied": draft_shape.tied},
            "training": report.__dict__,
        }
        (tmp / RECIPE_FILE).write_text(json.dumps(recipe, indent=2))
    return DemoPair(target, draft, built=True, recipe=_recipe_text(root))


def _recipe_text(root: Path) -> str:
    try:
        recipe = json.loads((root / RECIPE_FILE).read_text())
    except (OSError, ValueError):
        return ""
    t, d, r = recipe["target"], recipe["draft"], recipe["training"]
    return (f"target {t['layers']} layers × hidden {t['hidden']}, initialised from the corpus's bigram statistics "
            f"and trained {r['target_steps']} steps on {r['corpus_tokens']:,} tokens of {r['corpus_files']} Python "
            f"standard-library modules (compact vocabulary of {r['compact_vocab']:,} ids covering "
            f"{r['coverage']:.0%} of them; loss {r['target_loss']:.2f}); draft {d['layers']} layer × hidden "
            f"{d['hidden']}, distilled from the target for {r['draft_steps']} steps (KL {r['draft_kl']:.2f}); "
            f"trained in {r['seconds']:.0f} s.")
