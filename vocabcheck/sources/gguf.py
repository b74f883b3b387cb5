"""GGUF files (llama.cpp): the tokenizer and the embedding shapes, read from the header only.

A GGUF file has no tokenizer.json. llama.cpp's converters store the tokenizer as metadata (``tokenizer.ggml.model``,
``.tokens``, ``.token_type``, ``.merges``, ``.scores``, the bos/eos/pad/unk ids and the add-bos/eos flags), and the
tensor table gives every tensor's dimensions. This module reads exactly that and nothing else: the file is
memory-mapped and no tensor data is touched.

The header is walked here, with the type codes, quantisation block sizes and key names of the `gguf` package, instead
of through ``gguf.GGUFReader``: that reader builds a numpy view per array element (about 10 s for a 152k-token
vocabulary) and loops forever on an array whose count runs past the end of the file. Every count and length read here
is checked against the bytes that remain before anything is allocated for it.

The tokenizer is then built by transformers' GGUF tokenizer builders (``transformers.integrations.gguf``), the code
that ``AutoTokenizer.from_pretrained(..., gguf_file=...)`` runs, so the result is what transformers makes of the file.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, SourceNotFound, UnsupportedModel
from .base import MAX_CHAT_TEMPLATE_BYTES, TOKENIZER_ENTRIES_ENV, ModelSource, TensorShape, max_tokenizer_entries

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # v1 counted with 32-bit integers; llama.cpp dropped it in 2023
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_KEY_BYTES = 65_535
DEFAULT_ALIGNMENT = 32

# value type code -> (struct format, width); 8 (string) and 9 (array) are variable-length
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
            7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9

TOKENS = "tokenizer.ggml.tokens"
MERGES = "tokenizer.ggml.merges"
# string arrays that are decoded; every other string array is only walked and counted
_STRING_ARRAYS = (TOKENS, MERGES)
# numeric arrays that are kept; others are skipped
_NUMBER_ARRAYS = ("tokenizer.ggml.token_type", "tokenizer.ggml.scores")

SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # PyTorch order: GGUF lists dimensions fastest-moving first, ne = [hidden, rows]
    ggml_type: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: Mapping[str, Any]  # string arrays other than tokens/merges and unknown numeric arrays are counts
    tensors: tuple[GGUFTensor, ...]
    data_offset: int

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None


class _Cursor:
    """Bounds-checked reads from a memory-mapped file; every failure names what was being read."""

    def __init__(self, data: mmap.mmap, path: Path):
        self.data = data
        self.size = len(data)
        self.pos = 0
        self.path = path

    def need(self, count: int, what: str) -> None:
        if count < 0 or count > self.size - self.pos:
            raise InputError(f"truncated or corrupt GGUF header: {what} needs {count:,} bytes at offset "
                             f"{self.pos:,} but the file has {self.size:,}", self.path)

    def unpack(self, fmt: str, width: int, what: str) -> Any:
        self.need(width, what)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += width
        return value

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def raw_string(self, what: str, limit: int | None = None) -> bytes:
        length = self.u64(f"the length of {what}")
        if limit is not None and length > limit:
            raise InputError(f"GGUF {what} is {length:,} bytes long, over the {limit:,}-byte limit", self.path)
        self.need(length, what)
        value = self.data[self.pos:self.pos + length]
        self.pos += length
        return value

    def string(self, what: str, limit: int | None = None) -> str:
        raw = self.raw_string(what, limit)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"GGUF {what} is not UTF-8 text", self.path) from exc


def read_header(path: Path) -> GGUFHeader:
    """Metadata and tensor infos of one GGUF file; the tensor data is never read."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError as exc:
        raise SourceNotFound("GGUF file not found", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read GGUF file: {exc.strerror or exc}", path) from exc
    with handle:
        try:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file cannot be mapped
            raise InputError("not a GGUF file: the file is empty", path) from exc
        except OSError as exc:
            raise InputError(f"cannot map GGUF file: {exc.strerror or exc}", path) from exc
        with data:
            return _parse(_Cursor(data, path))


def _parse(cur: _Cursor) -> GGUFHeader:
    path = cur.path
    if cur.size < 24 or cur.data[:4] != MAGIC:
        raise InputError("not a GGUF file (no GGUF magic bytes)", path)
    cur.pos = 4
    version = cur.u32("the version")
    if version not in VERSIONS:
        if version & 0xFFFF == 0 and struct.unpack(">I", struct.pack("<I", version))[0] in VERSIONS:
            raise UnsupportedModel("big-endian GGUF files are not supported", path)
        raise UnsupportedModel(f"GGUF version {version} is not supported (versions 2 and 3 are)", path)
    tensor_count = cur.u64("the tensor count")
    kv_count = cur.u64("the metadata count")
    # a key-value pair takes at least 8 + 4 + 1 bytes, a tensor info at least 8 + 4 + 4 + 8 bytes
    if kv_count > (cur.size - cur.pos) // 13:
        raise InputError(f"GGUF header claims {kv_count:,} metadata entries, more than the file can hold", path)
    if tensor_count > (cur.size - cur.pos) // 24:
        raise InputError(f"GGUF header claims {tensor_count:,} tensors, more than the file can hold", path)

    metadata: dict[str, Any] = {}
    for index in range(kv_count):
        key = cur.string(f"metadata key {index}", MAX_KEY_BYTES)
        if key in metadata:
            raise InputError(f"GGUF metadata key {key!r} appears twice", path)
        value_type = cur.u32(f"the type of {key!r}")
        metadata[key] = _value(cur, key, value_type)

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise InputError(f"GGUF general.alignment must be a power of two, found {alignment!r}", path)

    entries = []
    names: set[str] = set()
    for index in range(tensor_count):
        name = cur.string(f"the name of tensor {index}", MAX_KEY_BYTES)
        if name in names:
            raise InputError(f"GGUF tensor {name!r} appears twice", path)
        names.add(name)
        n_dims = cur.u32(f"the dimension count of tensor {name!r}")
        if n_dims > MAX_DIMS:
            raise InputError(f"GGUF tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})", path)
        cur.need(8 * n_dims, f"the dimensions of tensor {name!r}")
        dims = struct.unpack_from(f"<{n_dims}Q", cur.data, cur.pos)
        cur.pos += 8 * n_dims
        type_code = cur.u32(f"the type of tensor {name!r}")
        offset = cur.u64(f"the offset of tensor {name!r}")
        entries.append((name, dims, type_code, offset))

    data_offset = -(-cur.pos // alignment) * alignment
    data_bytes = cur.size - data_offset
    tensors = tuple(_tensor(path, name, dims, type_code, offset, alignment, data_bytes)
                    for name, dims, type_code, offset in entries)
    return GGUFHeader(path=path, version=version, metadata=metadata, tensors=tensors, data_offset=data_offset)


def _value(cur: _Cursor, key: str, value_type: int) -> Any:
    if value_type in _SCALARS:
        fmt, width = _SCALARS[value_type]
        return cur.unpack(fmt, width, f"the value of {key!r}")
    if value_type == _STRING:
        limit = MAX_CHAT_TEMPLATE_BYTES if key.startswith("tokenizer.chat_template") else None
        return cur.string(f"the value of {key!r}", limit)
    if value_type != _ARRAY:
        raise InputError(f"GGUF metadata {key!r} has unknown value type {value_type}", cur.path)
    element_type = cur.u32(f"the element type of {key!r}")
    count = cur.u64(f"the length of {key!r}")
    remaining = cur.size - cur.pos
    if key in _STRING_ARRAYS or key in _NUMBER_ARRAYS:
        _check_entries(cur, key, count)
    if element_type in _SCALARS:
        fmt, width = _SCALARS[element_type]
        if count > remaining // width:
            raise InputError(f"GGUF array {key!r} claims {count:,} elements, more than the file holds", cur.path)
        if key in _NUMBER_ARRAYS:
            values = struct.unpack_from(f"<{count}{fmt[1]}", cur.data, cur.pos)
            cur.pos += count * width
            return list(values)
        if count <= 64:  # small arrays (rope sections, layer patterns) are kept for completeness
            values = struct.unpack_from(f"<{count}{fmt[1]}", cur.data, cur.pos)
            cur.pos += count * width
            return list(values)
        cur.pos += count * width
        return count
    if element_type == _STRING:
        if count > remaining // 8:
            raise InputError(f"GGUF array {key!r} claims {count:,} strings, more than the file holds", cur.path)
        if key in _STRING_ARRAYS:
            return _strings(cur, key, count)
        for index in range(count):
            length = cur.u64(f"the length of {key}[{index}]")
            cur.need(length, f"{key}[{index}]")
            cur.pos += length
        return count
    if element_type == _ARRAY:
        raise InputError(f"GGUF metadata {key!r} is an array of arrays, which GGUF readers do not support", cur.path)
    raise InputError(f"GGUF array {key!r} has unknown element type {element_type}", cur.path)


def _check_entries(cur: _Cursor, key: str, count: int) -> None:
    """A tokenizer array counted against the tokenizer entry cap from its header, before any element is read: the
    tokenizer.json made of it would hold an entry per token (three per merge)."""
    entries, limit = count * (3 if key == MERGES else 1), max_tokenizer_entries()
    if entries > limit:
        raise InputError(f"GGUF {key} holds {count:,} elements, more than the {limit:,} tokenizer entries vocabcheck "
                         f"reads (a token is 1, a merge 3), the limit that keeps a comparison within a few GB of "
                         f"memory; {TOKENIZER_ENTRIES_ENV} raises it", cur.path)


def _strings(cur: _Cursor, key: str, count: int) -> list[str]:
    data, pos, size = cur.data, cur.pos, cur.size
    unpack = struct.Struct("<Q").unpack_from
    out: list[str] = []
    append = out.append
    for index in range(count):
        if size - pos < 8:
            cur.pos = pos
            cur.need(8, f"the length of {key}[{index}]")
        (length,) = unpack(data, pos)
        pos += 8
        if length > size - pos:
            cur.pos = pos
            cur.need(length, f"{key}[{index}]")
        try:
            append(data[pos:pos + length].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InputError(f"GGUF {key}[{index}] is not UTF-8 text", cur.path) from exc
        pos += length
    cur.pos = pos
    return out


def _tensor(path: Path, name: str, dims: tuple[int, ...], type_code: int, offset: int, alignment: int,
            data_bytes: int) -> GGUFTensor:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        ggml_type = GGMLQuantizationType(type_code)
        block, type_size = GGML_QUANT_SIZES[ggml_type]
    except (ValueError, KeyError) as exc:
        raise UnsupportedModel(f"GGUF tensor {name!r} has ggml type {type_code}, unknown to the gguf package",
                               path) from exc
    elements = 1
    for dim in dims:
        elements *= dim
    if dims and dims[0] % block:
        raise InputError(f"GGUF tensor {name!r} has {dims[0]} elements per row, not a multiple of the "
                         f"{ggml_type.name} block size {block}", path)
    nbytes = elements // block * type_size
    if offset % alignment:
        raise InputError(f"GGUF tensor {name!r} starts at offset {offset:,}, not aligned to {alignment}", path)
    if offset > data_bytes or nbytes > data_bytes - offset:
        raise InputError(f"GGUF tensor {name!r} needs bytes {offset:,}-{offset + nbytes:,} of the data section, "
                         f"which holds {data_bytes:,}: the file is truncated", path)
    return GGUFTensor(name=name, shape=tuple(reversed(dims)), ggml_type=ggml_type.name, offset=offset, nbytes=nbytes)


# --- the model source ---------------------------------------------------------------------------------------------

ROLE_KEYS = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
             "pad": "tokenizer.ggml.padding_token_id", "unk": "tokenizer.ggml.unknown_token_id"}


def open_gguf(path: Path, spec: str) -> ModelSource:
    from . import convert

    header = read_header(path)
    meta = header.metadata
    number, count = _int(meta.get("split.no")), _int(meta.get("split.count"))
    if number and count:  # llama.cpp keeps the metadata, tokenizer included, in the first split only
        first = SPLIT_NAME.match(path.name)
        name = f"{first['prefix']}-00001-of-{count:05d}.gguf" if first else "the first split"
        raise UnsupportedModel(f"this is split {number + 1} of {count} of a split GGUF model; pass the first split "
                               f"({name})", path)
    architecture = header.architecture
    if architecture is None:
        raise InputError("GGUF file has no general.architecture", path)
    tokenizer_type = meta.get("tokenizer.ggml.model")
    tokens = meta.get(TOKENS)
    if not isinstance(tokenizer_type, str) or tokenizer_type == "none" or not isinstance(tokens, list) or not tokens:
        raise UnsupportedModel("this GGUF file carries no tokenizer (no tokenizer.ggml.model and "
                               "tokenizer.ggml.tokens)", path)
    for key in _NUMBER_ARRAYS:
        if key in meta and (not isinstance(meta[key], list) or len(meta[key]) != len(tokens)):
            raise InputError(f"GGUF {key} has {_count(meta[key]):,} entries for {len(tokens):,} tokens", path)
    if MERGES in meta and not isinstance(meta[MERGES], list):
        raise InputError(f"GGUF {MERGES} must be an array of strings", path)

    ids = {role: _token_id(meta, key, len(tokens), path) for role, key in ROLE_KEYS.items()}
    flags = {name: meta[f"tokenizer.ggml.{name}"] for name in ("add_bos_token", "add_eos_token")
             if isinstance(meta.get(f"tokenizer.ggml.{name}"), bool)}
    tokenizer_json, tokenizer_config = convert.from_gguf_metadata(architecture, meta, path)
    # bos/eos/pad/unk as the file states them, as strings, the way tokenizer_config.json names them
    for role, token_id in ids.items():
        tokenizer_config[f"{role}_token"] = tokens[token_id] if token_id is not None else None

    tensors = _all_tensors(header, path)
    config: dict[str, Any] = {
        "model_type": architecture,
        # what llama.cpp reports as n_vocab: the token list, unless the file states a vocab size
        "vocab_size": _int(meta.get(f"{architecture}.vocab_size")) or len(tokens),
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    hidden = _int(meta.get(f"{architecture}.embedding_length"))
    if hidden is not None:
        config["hidden_size"] = hidden
    for role, token_id in ids.items():
        if token_id is not None:
            config[f"{role}_token_id"] = token_id

    where = str(path)
    pre = meta.get("tokenizer.ggml.pre")
    provenance = {
        "tokenizer": f"{where} (GGUF tokenizer.ggml.model={tokenizer_type}"
                     + (f", pre={pre}" if isinstance(pre, str) else "") + "; built by transformers)",
        "tokenizer_config": f"{where} (GGUF tokenizer.ggml.* token ids"
                            + (" and " + "/".join(sorted(flags)) if flags else "") + ")",
        "config": f"{where} (GGUF {architecture}.* metadata and token count)",
        "tensors": f"{where} (GGUF tensor infos)",
    }
    chat_template = meta.get("tokenizer.chat_template")
    if isinstance(chat_template, str):
        provenance["chat_template"] = f"{where} (GGUF tokenizer.chat_template)"
    else:
        chat_template = None
    return ModelSource(
        spec=spec,
        kind="gguf",
        location=where,
        tokenizer_json=tokenizer_json,
        tokenizer_config=tokenizer_config,
        config=config,
        chat_template=chat_template,
        tensors=tensors,
        provenance=provenance,
        weights=(where,),
    )


def _all_tensors(header: GGUFHeader, path: Path) -> dict[str, TensorShape]:
    """Tensor shapes of the file and, for a split model (``name-00001-of-00003.gguf``), of its sibling splits."""
    shapes = {t.name: TensorShape(t.name, t.shape, t.ggml_type, path.name) for t in header.tensors}
    count = _int(header.metadata.get("split.count"))
    match = SPLIT_NAME.match(path.name)
    if not count or count <= 1 or match is None:
        return shapes
    for number in range(1, count + 1):
        sibling = path.with_name(f"{match['prefix']}-{number:05d}-of-{count:05d}.gguf")
        if sibling.name == path.name:
            continue
        if not sibling.is_file():
            raise SourceNotFound(f"split {number} of {count} ({sibling.name}) is missing beside {path.name}", sibling)
        for tensor in read_header(sibling).tensors:
            shapes[tensor.name] = TensorShape(tensor.name, tensor.shape, tensor.ggml_type, sibling.name)
    return shapes


def _token_id(meta: Mapping[str, Any], key: str, count: int, path: Path) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise InputError(f"GGUF {key} must be a non-negative integer, found {value!r}", path)
    if value >= count:
        raise InputError(f"GGUF {key} is {value:,}, beyond the {count:,} tokens of the file", path)
    return value


def _int(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list) else int(value) if type(value) is int else 0
