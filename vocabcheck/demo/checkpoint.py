"""Writing small Qwen2-architecture checkpoints with real row counts: the demo pair and the test fixtures.

A checkpoint here is what a hub repository holds: config.json, generation_config.json, tokenizer.json,
tokenizer_config.json and safetensors weights (one file, or shards with an index).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import atomic


@dataclass(frozen=True)
class ModelShape:
    rows: int
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 64
    tied: bool = True
    shard_bytes: int | None = None  # None: one model.safetensors
    seed: int = 0
    config_vocab_size: int | None = None  # None: equal to rows; else a deliberately wrong config
    extra_config: Mapping[str, Any] = field(default_factory=dict)

    def config(self, *, bos: int | None, eos: int | list[int] | None, pad: int | None):
        from transformers import Qwen2Config

        return Qwen2Config(
            vocab_size=self.rows, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            max_position_embeddings=4096, tie_word_embeddings=self.tied, bos_token_id=bos, eos_token_id=eos,
            pad_token_id=pad if pad is not None and pad < self.rows else None, architectures=["Qwen2ForCausalLM"], **dict(self.extra_config),
        )


def write_model(directory: Path, shape: ModelShape, *, tokenizer_json: Path | str,
                tokenizer_config: Mapping[str, Any], generation_config: Mapping[str, Any],
                state_dict: Mapping[str, Any] | None = None) -> Path:
    """Write a seeded Qwen2 checkpoint into ``directory`` atomically (the directory appears complete or not at all).

    ``state_dict`` (optional) replaces the random weights, for trained models.
    """
    import torch
    import transformers
    from transformers import Qwen2ForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    eos = generation_config.get("eos_token_id")
    first_eos = eos[0] if isinstance(eos, list) and eos else eos
    with atomic.directory(directory) as tmp:
        torch.manual_seed(shape.seed)
        config = shape.config(bos=generation_config.get("bos_token_id"), eos=first_eos,
                              pad=generation_config.get("pad_token_id"))
        model = Qwen2ForCausalLM(config)
        if state_dict is not None:
            model.load_state_dict(state_dict, strict=False)
        model.eval()
        kwargs = {"max_shard_size": shape.shard_bytes} if shape.shard_bytes else {}
        model.save_pretrained(tmp, **kwargs)
        if shape.config_vocab_size is not None:
            config_path = tmp / "config.json"
            data = json.loads(config_path.read_text())
            data["vocab_size"] = shape.config_vocab_size
            config_path.write_text(json.dumps(data, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps(dict(generation_config), indent=2))
        (tmp / "tokenizer_config.json").write_text(json.dumps(dict(tokenizer_config), indent=2, ensure_ascii=False))
        if isinstance(tokenizer_json, Path):
            shutil.copyfile(tokenizer_json, tmp / "tokenizer.json")
        else:
            (tmp / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    return directory
