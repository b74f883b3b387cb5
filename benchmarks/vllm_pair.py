"""A Qwen2.5-shaped pair that vLLM's CPU attention can run (head size 32; the demo draft's 16 it cannot), for
`bench --compare-vllm` and reports/vllm/:

- target: the real Qwen2.5 tokenizer, 152,064 rows (untied), hidden 256, 4 layers, 8 heads of 32, seeded weights;
- draft: the target's first layer, its embedding, final norm and output head cut to 151,936 rows (as Qwen2.5-0.5B
  ships its rows): a layer-skip draft, a quarter of the target's layers. So that it agrees with the target often
  but not always, the target's later layers write into the residual stream at LATER_SCALE of their seeded weights
  (their o_proj and down_proj scaled).

    python -m benchmarks.vllm_pair /tmp/vllm-pair     # writes /tmp/vllm-pair/target and /tmp/vllm-pair/draft

The weights are seeded, not trained: the pair measures what each engine's step costs and how it speculates, not text
quality. A padded-compatible pair, so `--engine vllm` aligns the draft first, as it would Qwen2.5-0.5B.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import ModelShape, write_model

SHAPE = dict(hidden=256, heads=8, kv_heads=2, intermediate=512, tied=False)
LATER_SCALE = 0.025


def write_pair(root: Path) -> tuple[Path, Path]:
    from safetensors.torch import load_file

    tokenizer = qwen.cached_tokenizer_json(root / "tokenizers")
    common = dict(tokenizer_json=tokenizer, tokenizer_config=qwen.tokenizer_config(),
                  generation_config=qwen.generation_config())
    target = root / "target"
    if not target.is_dir():
        import torch
        from transformers import Qwen2ForCausalLM

        shape = ModelShape(rows=qwen.ROWS_LARGE, layers=4, seed=17, **SHAPE)
        torch.manual_seed(shape.seed)
        model = Qwen2ForCausalLM(shape.config(bos=None, eos=qwen.generation_config().get("eos_token_id")[0],
                                              pad=None))
        state = {name: (tensor * LATER_SCALE if (".o_proj." in name or ".down_proj." in name)
                        and ".layers.0." not in name else tensor) for name, tensor in model.state_dict().items()}
        write_model(target, shape, state_dict=state, **common)
    draft = root / "draft"
    if not draft.is_dir():
        weights = load_file(str(target / "model.safetensors"))
        kept = {name: (tensor[:qwen.ROWS_SMALL].clone() if tensor.shape[0] == qwen.ROWS_LARGE else tensor)
                for name, tensor in weights.items() if ".layers." not in name or ".layers.0." in name}
        write_model(draft, ModelShape(rows=qwen.ROWS_SMALL, layers=1, seed=18, **SHAPE), state_dict=kept, **common)
    return target, draft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    target, draft = write_pair(parser.parse_args().root)
    print(target)
    print(draft)


if __name__ == "__main__":
    main()
