"""A pair whose draft pass costs about what a target pass does, with acceptance near 0.6: where speculation can only
just pay, so `-k auto` must never lose to plain decoding.

    python -m benchmarks.expensive_draft /tmp/expensive            # writes /tmp/expensive/{target,draft}
    python -m benchmarks.expensive_draft /tmp/expensive --check   # and prints the draft's acceptance

The target is the demo target's shape (Qwen2, 2 layers × hidden 256, the Qwen2.5 tokenizer, 152,064 untied rows)
with seeded random weights; the draft is the same network with seeded Gaussian noise added to every weight (``noise``
times each tensor's own standard deviation) and its embedding and output head cut to 151,936 rows, as Qwen2.5-0.5B
pads them. So the pair is padded-compatible and a draft forward costs what a target forward does: on a CPU both
are dominated by the 152k-row output head. ``--check`` runs ``vocabcheck run --method draft -k 4`` on the bench's
default prompts and prints the acceptance, to choose ``--noise``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from vocabcheck import atomic
from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import write_model
from vocabcheck.demo.pair import TARGET_SHAPE

ROOT = Path(__file__).resolve().parent.parent
SHAPE = TARGET_SHAPE.__class__(**{**TARGET_SHAPE.__dict__, "shard_bytes": None, "seed": 17})
DRAFT_ROWS = qwen.ROWS_SMALL


def write_pair(out: Path, noise: float, seed: int = 0) -> tuple[Path, Path]:
    import torch
    from tokenizers import Tokenizer  # noqa: F401  (the tokenizer file is rebuilt from qwen.tiktoken)

    tokenizer = qwen.cached_tokenizer_json(out / "tokenizer")
    target, draft = out / "target", out / "draft"
    common = dict(tokenizer_json=tokenizer, tokenizer_config=qwen.tokenizer_config(),
                  generation_config=qwen.generation_config())
    if not target.is_dir():
        write_model(target, SHAPE, **common)
    from safetensors.torch import load_file

    weights = load_file(str(target / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in sorted(weights.items()):
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            tensor = tensor[:DRAFT_ROWS]
        spread = float(tensor.float().std()) if tensor.numel() > 1 else 0.0
        state[name] = (tensor + noise * spread * torch.randn(tensor.shape, generator=generator)).contiguous()
    draft_shape = SHAPE.__class__(**{**SHAPE.__dict__, "rows": DRAFT_ROWS})
    if draft.exists():
        import shutil

        shutil.rmtree(draft)
    write_model(draft, draft_shape, state_dict=state, **common)
    atomic.write_text(out / "recipe.json", json.dumps({"noise": noise, "seed": seed, "target_seed": SHAPE.seed}))
    return target, draft


def acceptance(target: Path, draft: Path, prompts: int = 8, tokens: int = 32) -> float:
    from vocabcheck.bench import default_prompts

    prompt_file = target.parent / "check-prompts.jsonl"
    prompt_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in default_prompts(prompts)))
    done = subprocess.run([sys.executable, "-m", "vocabcheck", "run", str(target), str(draft), "--method", "draft",
                           "-k", "4", "--prompt-file", str(prompt_file), "--max-new-tokens", str(tokens), "--json"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          check=True)
    metrics = json.loads(done.stdout)["metrics"]
    return metrics["acceptance_rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    target, draft = write_pair(args.out, args.noise, args.seed)
    print(target, draft)
    if args.check:
        print(f"acceptance at k = 4: {acceptance(target, draft):.3f}")


if __name__ == "__main__":
    main()
