"""Tensor shapes from a local checkpoint, read from headers only: no weight is loaded.

safetensors headers are read after a bounds check of the 8-byte header length against the file size and a cap, and
every tensor entry is validated (shape, dtype, offsets inside the data section, as long as the shape needs and
overlapping no other tensor) by :func:`parse_safetensors_header`, which also checks the headers read from the hub;
sharded checkpoints through their index, whose file names must stay inside the model directory. PyTorch ``.bin``
checkpoints are read only with ``torch.load(weights_only=True, mmap=True)``: tensors are memory-mapped, never
unpickled as arbitrary objects.
"""

from __future__ import annotations

import itertools
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, SourceNotFound
from .base import MAX_INDEX_JSON_BYTES, TensorShape, inside, parse_json, read_json_object

# Real headers are 5-60 KB; a longer one is refused before it is read (huggingface_hub refuses over 25 MB).
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
    others = sorted(p for p in directory.glob("*.safetensors") if not p.name.startswith("adapter") and p.is_file())
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
        try:
            present = path.is_file()
        except OSError as exc:  # a name too long for the file system, a component that is not a directory...
            raise InputError(f"checkpoint index names a shard that cannot be opened: {_short(path.name)} "
                             f"({exc.strerror or exc})", index) from exc
        if not present:
            raise SourceNotFound(f"shard {_short(path.name)} named by {index.name} is missing", path)
    return files


def _read_safetensors_files(files: tuple[Path, ...]) -> dict[str, TensorShape]:
    tensors: dict[str, TensorShape] = {}
    for path in files:
        tensors.update(safetensors_shapes(path))
    return tensors


# bits per element of the dtypes the safetensors format defines (the safetensors library's Dtype enum)
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def safetensors_shapes(path: Path) -> dict[str, TensorShape]:
    """Shapes and dtypes of every tensor in one safetensors file, from its header (:func:`parse_safetensors_header`).

    The 8-byte header length is checked against the file size and a cap before the header is read.
    """
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):  # a FIFO or a device: opening or reading it could block forever
            raise InputError("not a regular file", path)
        size = status.st_size
        with open(path, "rb") as handle:
            header_len = safetensors_header_length(handle.read(8), size, path)
            body = handle.read(header_len)
    except OSError as exc:
        raise InputError(f"cannot read safetensors file: {exc.strerror or exc}", path) from exc
    if len(body) < header_len:
        raise InputError(f"safetensors header claims {header_len:,} bytes but the file has {size:,}", path)
    return parse_safetensors_header(body, size, path.name, path)


def safetensors_header_length(head: bytes, file_size: int | None, where: str | Path) -> int:
    """The header length from the first 8 bytes of a safetensors file, checked against the file's size (when it is
    known) and :data:`MAX_SAFETENSORS_HEADER_BYTES`, before anything is read for it."""
    if len(head) < 8:
        raise InputError("not a safetensors file: shorter than its 8-byte header length", where)
    (header_len,) = struct.unpack("<Q", head[:8])
    if file_size is not None and header_len > file_size - 8:
        raise InputError(f"safetensors header claims {header_len:,} bytes but the file has {file_size:,}", where)
    if header_len > MAX_SAFETENSORS_HEADER_BYTES:
        raise InputError(f"safetensors header of {header_len:,} bytes is over the "
                         f"{MAX_SAFETENSORS_HEADER_BYTES:,}-byte limit", where)
    return header_len


def parse_safetensors_header(header: bytes, file_size: int | None, file: str,
                             where: str | Path) -> dict[str, TensorShape]:
    """Tensor name -> shape from the JSON header of a safetensors file whose size is ``file_size`` (``None``: not
    known), named ``file``; every refusal is an :class:`InputError` naming ``where``.

    The one parser for local files and for headers read from the hub by range request. The safetensors library
    validates a header only together with the whole file (``safe_open`` maps it, ``deserialize`` takes all of its
    bytes), so what it checks is checked here, from the header and the file size alone: a JSON object; a
    ``__metadata__`` of strings; for every tensor a known dtype, a shape of non-negative integers and two integer
    ``data_offsets`` in order, inside the data section, holding exactly shape x dtype width bytes, overlapping no
    other tensor. A header therefore cannot claim rows its file does not have.
    """
    value = parse_json(header, where, "safetensors header")
    if not isinstance(value, dict):
        raise InputError(f"safetensors header must hold a JSON object, found {type(value).__name__}", where)
    data_bytes = None if file_size is None else file_size - 8 - len(header)
    _check_metadata(value.get("__metadata__"), where)
    shapes: dict[str, TensorShape] = {}
    spans: list[tuple[int, int, str]] = []
    for name, info in value.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = _tensor_entry(name, info, data_bytes, where)
        if end > begin:
            spans.append((begin, end, name))
        shapes[name] = TensorShape(name=name, shape=tuple(shape), dtype=dtype, file=file)
    _check_overlaps(spans, where)
    return shapes


def _check_metadata(metadata: object, where: str | Path) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise InputError("safetensors header '__metadata__' must map names to strings, found "
                         f"{type(metadata).__name__}", where)
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise InputError(f"safetensors header '__metadata__' must map names to strings, not {_short(key)} to "
                             f"{type(value).__name__}", where)


def _tensor_entry(name: str, info: object, data_bytes: int | None,
                  where: str | Path) -> tuple[str, list[int], tuple[int, int]]:
    """The dtype, shape and offsets of one tensor entry, each checked."""
    if not isinstance(info, dict):
        raise InputError(f"safetensors header entry {_short(name)} is not an object", where)
    shape, dtype, offsets = info.get("shape"), info.get("dtype"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise InputError(f"safetensors header gives tensor {_short(name)} an invalid shape {_short(shape)}", where)
    if not isinstance(dtype, str):
        raise InputError(f"safetensors header gives tensor {_short(name)} an invalid dtype", where)
    if dtype not in SAFETENSORS_DTYPE_BITS:
        raise InputError(f"safetensors header gives tensor {_short(name)} the unknown dtype {_short(dtype)}", where)
    limit = "" if data_bytes is None else f"the file's {data_bytes:,} data bytes"
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] or (data_bytes is not None and offsets[1] > data_bytes)):
        raise InputError(f"safetensors header places tensor {_short(name)} at bytes {_short(offsets)}, outside "
                         f"{limit or 'the file'}", where)
    if _nbytes(shape, SAFETENSORS_DTYPE_BITS[dtype]) != offsets[1] - offsets[0]:
        raise InputError(f"safetensors header gives tensor {_short(name)} the shape {_short(shape)} of {dtype}, "
                         f"which does not fit its {offsets[1] - offsets[0]:,} bytes", where)
    return dtype, shape, (offsets[0], offsets[1])


def _check_overlaps(spans: list[tuple[int, int, str]], where: str | Path) -> None:
    spans.sort()
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise InputError(f"safetensors header places tensors {_short(first)} and {_short(second)} on the same "
                             "bytes", where)


def _nbytes(shape: list[int], bits: int) -> int | None:
    """Bytes of a tensor; ``None`` when the element count passes any real file (a shape of huge dimensions)."""
    elements = 1
    for dim in shape:
        elements *= dim
        if elements > 1 << 62:
            return None
    return -(-elements * bits // 8)


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


# A torch.save archive keeps tensors in separate records; its pickle (data.pkl) only lists them: a few hundred KB for
# the largest checkpoints.
MAX_PICKLE_BYTES = 64 * 1024 * 1024
# torch.load reports a refused pickle through regular expressions that take time quadratic in the longest run of
# non-blank characters in the message (a 600 KB global name: hours); no real checkpoint has a string that long.
MAX_PICKLE_WORD = 1024


def pickle_shapes(path: Path) -> dict[str, TensorShape]:
    """Shapes from a PyTorch checkpoint, loaded with ``weights_only=True`` and memory-mapped.

    The pickle is first read as opcodes (``pickletools``, which executes nothing) so that a damaged or hostile one is
    refused before torch sees it; then torch's weights-only unpickler accepts only tensors and plain containers.
    """
    import pickle

    import torch

    _check_pickle(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise InputError("refused: this pickle holds more than tensors (torch.load weights_only=True rejected it: "
                         f"{_plain(exc)}); convert the checkpoint to safetensors", path) from exc
    except RuntimeError as exc:
        raise InputError(f"cannot read PyTorch checkpoint: {_plain(exc)}", path) from exc
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(f"cannot read PyTorch checkpoint: {_plain(exc)}", path) from exc
    except Exception as exc:  # torch's readers of zip and pickle raise IndexError, KeyError... on damaged files
        raise InputError(f"cannot read PyTorch checkpoint ({type(exc).__name__}: {_plain(exc)})", path) from exc
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


def _check_pickle(path: Path) -> None:
    """Read the pickle records of a torch.save zip archive as opcodes, without executing them; refuse one that is
    damaged, over :data:`MAX_PICKLE_BYTES`, or holds a string with a run of more than :data:`MAX_PICKLE_WORD`
    non-blank characters. A file that is not a zip archive is left to torch, which refuses to memory-map it before
    unpickling anything."""
    import pickletools
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    with archive:
        for info in archive.infolist():
            if not info.filename.endswith("data.pkl"):
                continue
            if info.file_size > MAX_PICKLE_BYTES:
                raise InputError(f"the pickle {info.filename} is {info.file_size:,} bytes, over the "
                                 f"{MAX_PICKLE_BYTES:,}-byte limit", path)
            try:
                data = archive.read(info)
                for _, argument, position in pickletools.genops(data):
                    if isinstance(argument, (str, bytes)) and len(argument) > MAX_PICKLE_WORD \
                            and max(map(len, argument.split()), default=0) > MAX_PICKLE_WORD:
                        raise InputError(f"refused: the pickle {info.filename} holds a string of {len(argument):,} "
                                         f"characters at byte {position:,}, which no checkpoint of tensors needs; "
                                         "convert the checkpoint to safetensors", path)
            except InputError:
                raise
            except Exception as exc:  # pickletools' ValueError for an unknown opcode or a truncated pickle, zip errors
                raise InputError(f"cannot read PyTorch checkpoint: its pickle {info.filename} is damaged "
                                 f"({type(exc).__name__}: {_plain(exc)})", path) from exc


def _plain(exc: BaseException) -> str:
    """The first line of an exception's message without terminal colour codes, at most 200 characters."""
    import re

    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
