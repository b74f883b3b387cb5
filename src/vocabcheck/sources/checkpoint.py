"""Tensor shapes from a local checkpoint, read from headers only: no weight is loaded.

safetensors files are read through `huggingface_hub.parse_local_safetensors_file_metadata` after a bounds check of the
8-byte header length against the file size; sharded checkpoints through their index, whose file names must stay
inside the model directory. PyTorch ``.bin`` checkpoints are read only with ``torch.load(weights_only=True,
mmap=True)``: tensors are memory-mapped, never unpickled as arbitrary objects.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, SourceNotFound
from .base import MAX_INDEX_JSON_BYTES, TensorShape, inside, read_json_object

# huggingface_hub refuses headers over 25 MB; the check below runs first so that the message names the file size.
MAX_SAFETENSORS_HEADER_BYTES = 100 * 1024 * 1024

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"


@dataclass(frozen=True)
class Checkpoint:
    tensors: dict[str, TensorShape]
    files: tuple[Path, ...]
    description: str


def find_checkpoint(directory: Path) -> Checkpoint | None:
    """The checkpoint in ``directory``, in the order transformers prefers, or ``None`` when there is none."""
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        files = _index_files(directory, index)
        return Checkpoint(_read_safetensors_files(files), files, f"{index.name} ({len(files)} shards, headers)")
    single = directory / SAFETENSORS_SINGLE
    if single.is_file():
        return Checkpoint(safetensors_shapes(single), (single,), f"{single.name} (header)")
    others = sorted(p for p in directory.glob("*.safetensors") if not p.name.startswith("adapter"))
    if others:
        names = ", ".join(p.name for p in others)
        return Checkpoint(_read_safetensors_files(tuple(others)), tuple(others), f"{names} (headers)")
    index = directory / BIN_INDEX
    if index.is_file():
        files = _index_files(directory, index)
        tensors: dict[str, TensorShape] = {}
        for path in files:
            tensors.update(pickle_shapes(path))
        return Checkpoint(tensors, files, f"{index.name} ({len(files)} shards, weights_only)")
    single = directory / BIN_SINGLE
    if single.is_file():
        return Checkpoint(pickle_shapes(single), (single,), f"{single.name} (weights_only)")
    return None


def _index_files(directory: Path, index: Path) -> tuple[Path, ...]:
    data = read_json_object(index, MAX_INDEX_JSON_BYTES, "checkpoint index")
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError("checkpoint index has no 'weight_map' object", index)
    if not all(isinstance(name, str) for name in weight_map.values()):
        raise InputError("checkpoint index 'weight_map' must map tensor names to file names", index)
    names = sorted(set(weight_map.values()))
    files = tuple(inside(directory, name, "checkpoint index", index) for name in names)
    for path in files:
        if not path.is_file():
            raise SourceNotFound(f"shard {path.name} named by {index.name} is missing", path)
    return files


def _read_safetensors_files(files: tuple[Path, ...]) -> dict[str, TensorShape]:
    tensors: dict[str, TensorShape] = {}
    for path in files:
        tensors.update(safetensors_shapes(path))
    return tensors


def safetensors_shapes(path: Path) -> dict[str, TensorShape]:
    """Shapes and dtypes of every tensor in one safetensors file, from its header."""
    from huggingface_hub import parse_local_safetensors_file_metadata
    from huggingface_hub.errors import SafetensorsParsingError

    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        raise InputError(f"cannot read safetensors file: {exc.strerror or exc}", path) from exc
    if len(head) < 8:
        raise InputError("not a safetensors file: shorter than its 8-byte header length", path)
    (header_len,) = struct.unpack("<Q", head)
    if header_len > size - 8:
        raise InputError(f"safetensors header claims {header_len:,} bytes but the file has {size:,}", path)
    if header_len > MAX_SAFETENSORS_HEADER_BYTES:
        raise InputError(f"safetensors header of {header_len:,} bytes is over the "
                         f"{MAX_SAFETENSORS_HEADER_BYTES:,}-byte limit", path)
    try:
        meta = parse_local_safetensors_file_metadata(path)
    except SafetensorsParsingError as exc:
        raise InputError(f"safetensors header cannot be read: {_reason(exc)}", path) from exc
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise InputError("safetensors header has an unexpected layout", path) from exc
    data_bytes = size - 8 - header_len
    shapes: dict[str, TensorShape] = {}
    for name, info in meta.tensors.items():
        shape = info.shape
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise InputError(f"safetensors header gives tensor {name!r} an invalid shape {shape!r}", path)
        offsets = info.data_offsets
        if (len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise InputError(f"safetensors header places tensor {name!r} at bytes {list(offsets)!r}, outside the "
                             f"file's {data_bytes:,} data bytes", path)
        if not isinstance(info.dtype, str):
            raise InputError(f"safetensors header gives tensor {name!r} an invalid dtype", path)
        shapes[name] = TensorShape(name=name, shape=tuple(shape), dtype=info.dtype, file=path.name)
    return shapes


def _reason(exc: Exception) -> str:
    text = str(exc)
    # huggingface_hub prefixes "Failed to parse safetensors header for '<file>' (<context>): "
    return text.split("): ", 1)[-1].strip() or type(exc).__name__


def pickle_shapes(path: Path) -> dict[str, TensorShape]:
    """Shapes from a PyTorch checkpoint, loaded with ``weights_only=True`` and memory-mapped."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise InputError("refused: this pickle holds more than tensors (torch.load weights_only=True rejected it: "
                         f"{str(exc).splitlines()[0][:200]}); convert the checkpoint to safetensors", path) from exc
    except RuntimeError as exc:
        raise InputError(f"cannot read PyTorch checkpoint: {str(exc).splitlines()[0][:200]}", path) from exc
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(f"cannot read PyTorch checkpoint: {exc}", path) from exc
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise InputError("PyTorch checkpoint does not hold a state dict", path)
    return {
        name: TensorShape(name=name, shape=tuple(value.shape), dtype=str(value.dtype).removeprefix("torch."),
                          file=path.name)
        for name, value in state.items()
        if isinstance(name, str) and isinstance(value, torch.Tensor)
    }
