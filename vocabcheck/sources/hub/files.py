"""Which files of a repository vocabcheck reads, and how large each may be."""

from __future__ import annotations

from pathlib import PurePosixPath

from ...errors import InputError, SourceNotFound
from ..base import (
    MAX_CHAT_TEMPLATE_BYTES,
    MAX_CONFIG_JSON_BYTES,
    MAX_INDEX_JSON_BYTES,
    MAX_TOKENIZER_JSON_BYTES,
    parse_json,
    read_capped,
)
from ..checkpoint import SAFETENSORS_INDEX, SAFETENSORS_SINGLE
from ..local import SLOW_TOKENIZER_FILES, TOKENIZER_JSON
from .snapshot import Snapshot

TEKKEN_JSON = "tekken.json"

# What compare/inspect download, with the size each may have (checked against the hub's file list first, and against
# the bytes that arrive while it downloads).
SMALL_FILES: dict[str, int] = {
    TOKENIZER_JSON: MAX_TOKENIZER_JSON_BYTES,
    "tokenizer_config.json": MAX_CONFIG_JSON_BYTES,
    "special_tokens_map.json": MAX_CONFIG_JSON_BYTES,
    "config.json": MAX_CONFIG_JSON_BYTES,
    "generation_config.json": MAX_CONFIG_JSON_BYTES,
    "chat_template.jinja": MAX_CHAT_TEMPLATE_BYTES,
    "chat_template.json": MAX_CHAT_TEMPLATE_BYTES,
}
# Only when the repository has no tokenizer.json: the files transformers converts (and its added tokens).
SLOW_FILES: dict[str, int] = {**{name: MAX_TOKENIZER_JSON_BYTES for name in SLOW_TOKENIZER_FILES},
                              "added_tokens.json": MAX_CONFIG_JSON_BYTES}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx", ".pkl")
_CAPS: dict[str, int] = {**SMALL_FILES, **SLOW_FILES, TEKKEN_JSON: MAX_TOKENIZER_JSON_BYTES,
                         SAFETENSORS_INDEX: MAX_INDEX_JSON_BYTES}


def size_cap(name: str) -> int | None:
    """The most bytes vocabcheck accepts for the file ``name``; ``None`` for weights (their listed size bounds them)."""
    return _CAPS.get(name)


def is_weight_file(name: str) -> bool:
    return name.lower().endswith(WEIGHT_SUFFIXES)


def tokenizer_files(snapshot: Snapshot) -> list[str]:
    """The tokenizer and config files of the snapshot that a comparison reads, each within its size cap."""
    files = snapshot.files
    wanted = dict(SMALL_FILES)
    if TOKENIZER_JSON not in files:
        wanted.update(SLOW_FILES)
        if not any(name in files for name in SLOW_TOKENIZER_FILES):
            wanted[TEKKEN_JSON] = MAX_TOKENIZER_JSON_BYTES
    names = [name for name in wanted if name in files]
    if not any(name in names for name in (TOKENIZER_JSON, TEKKEN_JSON, *SLOW_TOKENIZER_FILES)):
        weights = [n for n in files if n.lower().endswith(".gguf")]
        hint = " (it holds GGUF files: download one and pass its path)" if weights else ""
        raise SourceNotFound(f"{snapshot.uri} has no tokenizer: no tokenizer.json, tokenizer.model, vocab.json, "
                             f"vocab.txt or tekken.json{hint}")
    for name in names:
        size = files.get(name)
        if size is not None and size > wanted[name]:
            raise InputError(f"{name} is {size:,} bytes on the hub, over the {wanted[name]:,}-byte limit")
    return names


def checkpoint_files(snapshot: Snapshot) -> list[str]:
    """The safetensors files of the checkpoint, in the order transformers prefers (index, single file, any).
    The index must already be in the snapshot folder."""
    files = snapshot.files
    if SAFETENSORS_INDEX in files:
        index = snapshot.directory / SAFETENSORS_INDEX
        data = parse_json(read_capped(index, MAX_INDEX_JSON_BYTES, "checkpoint index"), index, "checkpoint index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map \
                or not all(isinstance(v, str) for v in weight_map.values()):
            raise InputError(f"{SAFETENSORS_INDEX} has no 'weight_map' mapping tensor names to file names")
        names = sorted(set(weight_map.values()))
        for name in names:
            if not _safe_name(name):
                raise InputError(f"{SAFETENSORS_INDEX} names a file outside the repository: {name!r}")
            if name not in files:
                raise SourceNotFound(f"shard {name} named by {SAFETENSORS_INDEX} is not in the repository")
        return names
    if SAFETENSORS_SINGLE in files:
        return [SAFETENSORS_SINGLE]
    return sorted(n for n in files if n.endswith(".safetensors") and "/" not in n and not n.startswith("adapter"))


def _safe_name(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and "\\" not in name and "\x00" not in name and not path.is_absolute() \
        and ".." not in path.parts
