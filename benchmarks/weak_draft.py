"""A draft that almost never agrees with its target: the demo draft's shape and tokenizer with untrained (seeded,
random) weights, written as a model directory so that `vocabcheck bench` and `run` can use it like any other.

    python -m benchmarks.weak_draft /tmp/weak-draft
    vocabcheck bench ~/.cache/vocabcheck/demo-v5/qwen2.5-shaped-target /tmp/weak-draft -k 1,4,auto ...

It is what `-k auto` is held against in reports/bench-auto/: with acceptance near zero, speculation can only cost,
so `auto` must stay within a few percent of no speculation.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

from vocabcheck.demo.pair import demo_pair


def write_weak_draft(out: Path, seed: int = 0) -> Path:
    source = demo_pair().draft
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).eval()
    save_file({name: tensor.contiguous() for name, tensor in model.state_dict().items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    print(write_weak_draft(parser.parse_args().out, parser.parse_args().seed))


if __name__ == "__main__":
    main()
