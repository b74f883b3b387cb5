"""Structure-aware mutations for the fuzz suite: JSON documents, safetensors files, GGUF files and PyTorch zip
checkpoints, all starting from real fixture files.

Every mutation draws its choices from a :class:`Chooser`, so the same code serves three drivers: hypothesis (choices
it can shrink), a seeded ``random.Random`` (the long run: an input is ``(target, seed)``), and atheris's
``FuzzedDataProvider`` (coverage-guided choices).
"""

from __future__ import annotations

import copy
import io
import json
import math
import random
import struct
import sys
import zipfile
import zlib
from contextlib import contextmanager
from typing import Any


class Chooser:
    """The source of every choice a mutation makes."""

    def below(self, n: int) -> int:  # 0 <= result < n
        raise NotImplementedError

    def chance(self, numerator: int, denominator: int) -> bool:
        return self.below(denominator) < numerator

    def pick(self, items):
        items = list(items) if not isinstance(items, (list, tuple, str, bytes)) else items
        return items[self.below(len(items))]

    def blob(self, max_len: int) -> bytes:
        return bytes(self.below(256) for _ in range(self.below(max_len + 1)))


class RandomChooser(Chooser):
    def __init__(self, seed: int):
        self.random = random.Random(seed)

    def below(self, n: int) -> int:
        return self.random.randrange(n) if n > 1 else 0

    def blob(self, max_len: int) -> bytes:
        return self.random.randbytes(self.random.randrange(max_len + 1))


class HypothesisChooser(Chooser):
    """Choices drawn from hypothesis's ``st.data()``: each one is shrinkable."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def below(self, n: int) -> int:
        return self.data.draw(self.st.integers(0, n - 1)) if n > 1 else 0

    def blob(self, max_len: int) -> bytes:
        return self.data.draw(self.st.binary(max_size=max_len))


class AtherisChooser(Chooser):
    """Choices read from libFuzzer's bytes; once they run out, from a generator seeded with them (an exhausted
    provider answers 0 to everything, which would make every short input the same first choice)."""

    def __init__(self, provider, data: bytes):
        self.provider = provider
        self.fallback = RandomChooser(zlib.crc32(data))

    def below(self, n: int) -> int:
        if n <= 1:
            return 0
        if self.provider.remaining_bytes() == 0:
            return self.fallback.below(n)
        return self.provider.ConsumeIntInRange(0, n - 1)

    def blob(self, max_len: int) -> bytes:
        return self.provider.ConsumeBytes(self.below(max_len + 1)) if self.provider.remaining_bytes() \
            else self.fallback.blob(max_len)


# --- interesting values -----------------------------------------------------------------------------------------

HUGE_INTS = (-1, 0, 1, 2, 7, 8, 255, 256, 65_535, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**60, 2**63 - 1,
             2**63, 2**64 - 1, 2**64, -(2**63), 10**30)
FLOATS = (0.5, -0.0, 1e308, -1e308, 1e-320, math.inf, -math.inf, math.nan)
STRINGS = ("", " ", "a", "Ġ", "\u0000", "\ud800", "\uffff", "<|endoftext|>", "<|im_end|>", "[UNK]", "../../etc/passwd",
           "/etc/passwd", "%s%n{0}", "\n\r\t", "😀" * 3, "[bold red]markup[/]", "\x1b[31mred")
KEYS = ("type", "model", "vocab", "merges", "added_tokens", "normalizer", "pre_tokenizer", "pre_tokenizers",
        "post_processor", "decoder", "id", "content", "special", "normalized", "unk_token", "unk_id", "byte_fallback",
        "dropout", "continuing_subword_prefix", "auto_map", "trust_remote_code", "tokenizer_class", "text_config",
        "vocab_size", "eos_token_id", "bos_token_id", "pad_token_id", "tie_word_embeddings", "hidden_size",
        "chat_template", "architectures", "model_type", "added_tokens_decoder", "eos_token", "bos_token",
        "add_bos_token", "weight_map", "metadata", "dtype", "shape", "data_offsets", "__metadata__", "pattern",
        "Regex", "String", "behavior", "single", "pair", "special_tokens", "ids", "tokens", "sep", "cls",
        "unk_token_id", "sliding_window", "layer_types", "torch_dtype")


def interesting(chooser: Chooser, document: Any) -> Any:
    """A value to put somewhere: an edge-case scalar, a huge or deeply nested value, or a copy of another node."""
    kind = chooser.below(14)
    if kind == 0:
        return None
    if kind == 1:
        return chooser.pick((True, False))
    if kind == 2:
        return chooser.pick(HUGE_INTS)
    if kind == 3:
        return chooser.pick(FLOATS)
    if kind == 4:
        return chooser.pick(STRINGS)
    if kind == 5:
        return chooser.pick(("A", "Ġ", "\u00e9", "<|x|>")) * chooser.pick((1000, 100_000))
    if kind == 6:
        return chooser.pick(([], {}, [[]], [None], {"": None}, {"type": "BPE"}, {"type": None}, {"type": 7}))
    if kind == 7:
        return nested(chooser.pick((50, 127, 128, 129, 400, 900, 990, 3000)), chooser.pick(("[]", "{}")))
    if kind == 8:
        return [chooser.pick((0, "a", None))] * chooser.pick((1000, 100_000))
    if kind == 9:
        return {f"k{i}": i for i in range(chooser.pick((2, 1000, 50_000)))}
    if kind == 10:
        return copy.deepcopy(_random_node(chooser, document, max_size=5_000))
    if kind == 11:
        return chooser.pick(HUGE_INTS) * chooser.pick((1, -1)) + chooser.below(3)
    if kind == 12:
        return chooser.blob(40).decode("latin-1")
    return chooser.pick(KEYS)


def nested(depth: int, shape: str) -> Any:
    value: Any = None
    for _ in range(depth):
        value = [value] if shape == "[]" else {"a": value}
    return value


# --- JSON documents ---------------------------------------------------------------------------------------------


def _children(node: Any) -> list:
    if isinstance(node, dict):
        return list(node)
    if isinstance(node, list):
        return list(range(len(node)))
    return []


def _random_slot(chooser: Chooser, document: Any) -> tuple[Any, Any] | None:
    """A random (container, key) pair, reached by a random walk from the root; ``None`` for a scalar root."""
    if not isinstance(document, (dict, list)) or not document:
        return None
    parent, key = document, chooser.pick(_children(document))
    for _ in range(12):
        child = parent[key]
        keys = _children(child)
        if not keys or chooser.chance(1, 3):
            break
        parent, key = child, chooser.pick(keys)
    return parent, key


def _random_node(chooser: Chooser, document: Any, max_size: int) -> Any:
    slot = _random_slot(chooser, document)
    if slot is None:
        return document
    node = slot[0][slot[1]]
    if isinstance(node, (dict, list)) and len(node) > max_size:
        return type(node)() if isinstance(node, list) else {}
    return node


@contextmanager
def deep_recursion():
    """Room for documents with values nested 3,000 deep (copied and serialised here)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def mutate_document(chooser: Chooser, document: Any, rounds: int | None = None) -> Any:
    """Apply 1-4 structural mutations to a parsed JSON document in place (the root may be replaced: returned)."""
    with deep_recursion():
        return _mutate_document(chooser, document, rounds)


def _mutate_document(chooser: Chooser, document: Any, rounds: int | None) -> Any:
    for _ in range(rounds if rounds is not None else 1 + chooser.below(4)):
        slot = _random_slot(chooser, document)
        if slot is None or chooser.chance(1, 60):
            document = interesting(chooser, document)
            continue
        parent, key = slot
        value = parent[key]
        op = chooser.below(12)
        if op == 0:  # delete
            del parent[key]
        elif op in (1, 2):  # replace with an interesting value
            parent[key] = interesting(chooser, document)
        elif op == 3:  # change the type, keeping the content where possible
            parent[key] = _retype(chooser, value)
        elif op == 4 and type(value) is int:  # nudge a number
            parent[key] = chooser.pick((value + 1, value - 1, -value, value * 2, value + 2**32, value * 1000 + 7,
                                        value // 2, 0))
        elif op == 5 and len(_children(parent)) > 1:  # swap two siblings' values (ids of two tokens...)
            other = chooser.pick(_children(parent))
            parent[key], parent[other] = parent[other], parent[key]
        elif op == 6 and isinstance(value, list) and value:  # list surgery
            cut = chooser.below(len(value) + 1)
            parent[key] = chooser.pick((value[:cut], value[cut:] + value[:cut], value + value[:cut],
                                        list(reversed(value)), value[:cut] + [copy.deepcopy(value[-1])] + value[cut:]))
        elif op == 7 and isinstance(value, dict):  # insert a key
            value[chooser.pick(KEYS) if chooser.chance(3, 4) else interesting_key(chooser)] = interesting(chooser,
                                                                                                          document)
        elif op == 8 and isinstance(value, dict) and value:  # rename a key (a token's string, a field's name)
            old = chooser.pick(list(value))
            new = chooser.pick((*STRINGS, chooser.pick(KEYS), old + "x", old.upper(), old[:-1]))
            value[new] = value.pop(old)
        elif op == 9 and isinstance(value, str):  # edit a string
            cut = chooser.below(len(value) + 1)
            parent[key] = chooser.pick((value[:cut], value + value, value[:cut] + chooser.pick(STRINGS) + value[cut:],
                                        value.swapcase(), value.replace(" ", "")))
        elif op == 10:  # share one node in two places (aliasing survives json.dumps as a copy)
            parent[key] = copy.deepcopy(_random_node(chooser, document, max_size=5_000))
        else:
            parent[key] = interesting(chooser, document)
    return document


def interesting_key(chooser: Chooser) -> str:
    return chooser.pick(STRINGS) if chooser.chance(1, 2) else chooser.pick(KEYS) + chooser.pick(("", "_", "s", "2"))


def _retype(chooser: Chooser, value: Any) -> Any:
    if isinstance(value, bool):
        return chooser.pick((int(value), str(value).lower(), None, [value]))
    if isinstance(value, int):
        return chooser.pick((str(value), float(value), bool(value), [value], {"id": value}))
    if isinstance(value, float):
        return chooser.pick((int(value) if math.isfinite(value) else 0, str(value), None))
    if isinstance(value, str):
        return chooser.pick((len(value), [value], {"content": value}, value.encode("utf-8", "replace").hex(), None))
    if isinstance(value, list):
        return chooser.pick(({str(i): v for i, v in enumerate(value)}, len(value), " ".join(map(str, value[:50])),
                             value[:1]))
    if isinstance(value, dict):
        return chooser.pick((list(value.values()), list(value), len(value), [list(kv) for kv in value.items()]))
    return chooser.pick(("null", 0, False))


def dumps(chooser: Chooser, document: Any) -> str:
    """Serialise a document one of the ways real files are written (or not quite)."""
    style = chooser.below(4)
    with deep_recursion():
        return _dumps(style, document)


def _dumps(style: int, document: Any) -> str:
    if style == 0:
        return json.dumps(document, ensure_ascii=False, indent=2)
    if style == 1:
        return json.dumps(document)
    return json.dumps(document, ensure_ascii=False)


def text_bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def mutate_text(chooser: Chooser, data: bytes) -> bytes:
    """Textual damage to a serialised JSON file: truncation, byte flips, huge literals, deep nesting, bad UTF-8."""
    op = chooser.below(11)
    at = chooser.below(len(data) + 1)
    if op == 0:
        return data[:at]
    if op == 1:
        data = bytearray(data)
        for _ in range(1 + chooser.below(8)):
            if data:
                data[chooser.below(len(data))] ^= 1 << chooser.below(8)
        return bytes(data)
    if op == 2:
        return data[:at] + chooser.blob(16) + data[at:]
    if op == 3:
        end = min(len(data), at + chooser.below(4096))
        return data[:at] + data[end:]
    if op == 4:  # a number literal no parser should have to hold
        literal = chooser.pick((b"1" + b"0" * 5000, b"1e999999", b"-1e999999", b"NaN", b"Infinity", b"-0",
                                b"123456789012345678901234567890", b"1" * 4301, b"0x10"))
        digits = [i for i in range(max(0, at - 4096), min(len(data), at + 4096)) if data[i:i + 1].isdigit()]
        if digits:
            start = end = chooser.pick(digits)
            while start > 0 and data[start - 1:start].isdigit():
                start -= 1
            while end < len(data) and data[end:end + 1].isdigit():
                end += 1
            return data[:start] + literal + data[end:]
        return data[:at] + literal + data[at:]
    if op == 5:  # deep nesting spliced in
        depth = chooser.pick((127, 128, 129, 990, 1_000, 5_000, 100_000))
        opener, closer = chooser.pick(((b"[", b"]"), (b'{"a":', b"}")))
        balanced = chooser.chance(1, 2)
        return data[:at] + opener * depth + b"0" + (closer * depth if balanced else b"") + data[at:]
    if op == 6:
        return chooser.pick((b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b" " * 100)) + data
    if op == 7:  # invalid UTF-8 inside the text
        return data[:at] + chooser.pick((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80")) + data[at:]
    if op == 8:  # duplicate a slice (duplicate keys, repeated entries)
        end = min(len(data), at + chooser.below(2048))
        return data[:end] + data[at:end] + data[end:]
    if op == 9:
        return b""
    return data + chooser.pick((b"\n", b"garbage", b"{}", b"\x00" * 10))


def mutate_json_file(chooser: Chooser, document: Any, *, text_damage: int = 4) -> bytes:
    """Structural mutation of a copy of ``document``, serialised; with probability 1/``text_damage``, textual
    damage on top."""
    with deep_recursion():
        data = text_bytes(dumps(chooser, mutate_document(chooser, copy.deepcopy(document))))
    if chooser.chance(1, text_damage):
        data = mutate_text(chooser, data)
    return data


# --- safetensors ------------------------------------------------------------------------------------------------


def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def safetensors_header(chooser: Chooser, header: dict, data_bytes: int) -> tuple[bytes, int]:
    """Mutated header bytes of a safetensors file and the length of the data section that follows them."""
    header = copy.deepcopy(header)
    op = chooser.below(6)
    if op <= 2:
        header = mutate_document(chooser, header)
    elif op == 3:  # a tensor whose offsets, shape or dtype lie
        names = [n for n in header if n != "__metadata__"]
        if names:
            entry = header[chooser.pick(names)]
            if isinstance(entry, dict):
                field = chooser.pick(("data_offsets", "shape", "dtype"))
                entry[field] = chooser.pick((
                    [0, 2**60], [2**64 - 1, 2**64], [-1, 0], [5, 3], [0, data_bytes + 1], [data_bytes, data_bytes],
                    [0], [0, 1, 2], ["0", "1"], [0.0, 1.0], [2**63, 2**63 + 8], [-(2**63), 0],
                    [2**40, 3], [151936, -32], [], [0], [2**62, 2**62], [1.5, 2], [[1], [2]], ["a"],
                    "F32", "F128", "", None, 7, "I64", "BOOL", "F8_E4M3",
                ))
    elif op == 4:
        header.setdefault("__metadata__", {})
        if isinstance(header["__metadata__"], dict):
            header["__metadata__"][chooser.pick(("format", "total_size", "x"))] = interesting(chooser, header)
        else:
            header["__metadata__"] = interesting(chooser, header)
    else:  # drop to a random subset of tensors
        names = list(header)
        header = {n: header[n] for n in names if chooser.chance(1, 2)}
    body = text_bytes(dumps(chooser, header))
    if chooser.chance(1, 4):
        body = mutate_text(chooser, body)
    if chooser.chance(1, 5):
        body += b" " * chooser.below(64)  # writers pad the header with spaces to an 8-byte boundary
    return body, data_bytes


def safetensors_file(chooser: Chooser, header: dict, data_bytes: int) -> tuple[bytes, int]:
    """(prefix bytes, total file size): the file is the prefix then zeros up to the size (a sparse tail)."""
    body, data_bytes = safetensors_header(chooser, header, data_bytes)
    length = len(body)
    if chooser.chance(1, 4):  # a lying header length
        length = chooser.pick((0, 1, 2, 7, len(body) - 1, len(body) + 1, len(body) + data_bytes,
                               len(body) + data_bytes + 1, 2**32, 2**60, 2**63, 2**64 - 1, 100 * 1024 * 1024 + 1))
        length = max(0, min(length, 2**64 - 1))
    prefix = struct.pack("<Q", length) + body
    size = len(prefix) + data_bytes
    op = chooser.below(8)
    if op == 0:
        size = chooser.below(len(prefix) + 1)  # truncated inside the header
    elif op == 1:
        size = len(prefix) + chooser.below(data_bytes + 1)  # truncated data
    elif op == 2:
        prefix = bytearray(prefix)
        for _ in range(1 + chooser.below(4)):
            prefix[chooser.below(len(prefix))] ^= 1 << chooser.below(8)
        prefix = bytes(prefix)
    return prefix[:size], size


# --- tiktoken ranks ---------------------------------------------------------------------------------------------


def mutate_ranks(chooser: Chooser, data: bytes) -> bytes:
    """A tiktoken ranks file (``base64 rank`` lines) with lying ranks, odd tokens, or textual damage."""
    import base64

    lines = data.splitlines()
    for _ in range(1 + chooser.below(3)):
        op = chooser.below(8)
        at = chooser.below(len(lines)) if lines else 0
        if not lines or op == 0:
            return mutate_text(chooser, data)
        token, _, rank = lines[at].partition(b" ")
        if op == 1:  # a rank that lies
            value = chooser.pick((*LYING, -1, -(2**63), 10**30, int(rank or b"0") + 1, 0))
            lines[at] = token + b" " + str(value).encode()
        elif op == 2:  # two tokens with one rank
            lines[at] = token + b" " + lines[chooser.below(len(lines))].partition(b" ")[2]
        elif op == 3:  # a long token
            lines[at] = base64.b64encode(chooser.pick((b"a", b"\xff", b"ab")) * chooser.pick((200, 1025, 100_000))) \
                + b" " + rank
        elif op == 4:
            del lines[at]
        elif op == 5:
            lines.insert(at, lines[chooser.below(len(lines))])
        elif op == 6:  # not base64, or more than two fields
            lines[at] = chooser.pick((b"!!!! " + rank, token + b" " + rank + b" 7", token, b"", token + b" x"))
        else:
            lines[at] = base64.b64encode(chooser.blob(8)) + b" " + rank
    return b"\n".join(lines) + b"\n"


# --- GGUF -------------------------------------------------------------------------------------------------------

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                12: "<d"}


class GGUFLayout:
    """The header of a GGUF file as fields with their offsets, so that mutations can lie about counts and lengths.

    ``fields`` lists (offset, width, kind): kind is ``count`` (tensor/kv/array counts), ``length`` (string lengths),
    ``type`` (value and element types), ``dim``, ``tensor-type``, ``offset``, ``scalar``. ``header_end`` is where the
    tensor infos end.
    """

    def __init__(self, data: bytes):
        self.data = data
        self.fields: list[tuple[int, int, str]] = []
        self.kv_spans: list[tuple[int, int, str]] = []  # (start, end, key) of each key-value pair
        pos = 4
        self.version = self._u(pos, 4, "version")
        pos += 4
        self.tensor_count = self._u(pos, 8, "count")
        pos += 8
        kv_count = self._u(pos, 8, "count")
        pos += 8
        for _ in range(kv_count):
            start = pos
            key, pos = self._string(pos)
            value_type = self._u(pos, 4, "type")
            pos = self._value(pos + 4, value_type)
            self.kv_spans.append((start, pos, key))
        self.tensor_start = pos
        for _ in range(self.tensor_count):
            _, pos = self._string(pos)
            n_dims = self._u(pos, 4, "count")
            pos += 4
            for _ in range(n_dims):
                self._u(pos, 8, "dim")
                pos += 8
            self._u(pos, 4, "tensor-type")
            self._u(pos + 4, 8, "offset")
            pos += 12
        self.header_end = pos

    def _u(self, pos: int, width: int, kind: str) -> int:
        self.fields.append((pos, width, kind))
        return int.from_bytes(self.data[pos:pos + width], "little")

    def _string(self, pos: int) -> tuple[str, int]:
        length = self._u(pos, 8, "length")
        return self.data[pos + 8:pos + 8 + length].decode("utf-8", "replace"), pos + 8 + length

    def _value(self, pos: int, value_type: int) -> int:
        if value_type in GGUF_SCALARS:
            self.fields.append((pos, struct.calcsize(GGUF_SCALARS[value_type]), "scalar"))
            return pos + struct.calcsize(GGUF_SCALARS[value_type])
        if value_type == 8:
            return self._string(pos)[1]
        element_type = self._u(pos, 4, "type")
        count = self._u(pos + 4, 8, "count")
        pos += 12
        if element_type in GGUF_SCALARS:
            width = struct.calcsize(GGUF_SCALARS[element_type])
            if count <= 16:
                for i in range(count):
                    self.fields.append((pos + i * width, width, "scalar"))
            return pos + count * width
        for i in range(count):
            if i < 64 or i >= count - 4:
                pos = self._string(pos)[1]
            else:  # do not record every string length of a 150k-token list
                (length,) = struct.unpack_from("<Q", self.data, pos)
                pos += 8 + length
        return pos


LYING = (0, 1, 2, 3, 4, 7, 8, 12, 13, 24, 31, 32, 33, 255, 256, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
         2**40, 2**60, 2**63 - 1, 2**63, 2**64 - 1)


def mutate_gguf(chooser: Chooser, data: bytes, layout: GGUFLayout) -> bytes:
    """A GGUF file with a lying count/length/type, flipped header bytes, a truncation, or a key-value pair dropped,
    duplicated or moved."""
    op = chooser.below(9)
    out = bytearray(data)
    if op <= 2:  # overwrite a structural field
        pos, width, kind = chooser.pick(layout.fields)
        if kind in ("count", "length", "dim", "offset"):
            current = int.from_bytes(data[pos:pos + width], "little")
            value = chooser.pick((*LYING, current + 1, current - 1, current * 2, current + 2**32))
        elif kind in ("type", "tensor-type"):
            value = chooser.pick((0, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 30, 39, 40, 255, 2**31))
        else:
            value = chooser.below(2 ** (8 * width))
        out[pos:pos + width] = (value % 2 ** (8 * width)).to_bytes(width, "little")
    elif op == 3:  # flip bytes in the header
        for _ in range(1 + chooser.below(8)):
            at = chooser.below(layout.header_end)
            out[at] ^= 1 << chooser.below(8)
    elif op == 4:  # truncate
        cut = chooser.pick((chooser.below(layout.header_end + 1), chooser.below(len(data) + 1), 0, 3, 4, 8, 23, 24))
        return bytes(out[:cut])
    elif op in (5, 6, 7) and layout.kv_spans:  # drop, duplicate or corrupt a whole key-value pair
        start, end, _ = chooser.pick(layout.kv_spans)
        if op == 5:
            del out[start:end]
            _set_kv_count(out, layout, len(layout.kv_spans) - (0 if chooser.chance(1, 3) else 1))
        elif op == 6:
            out[end:end] = data[start:end]
            _set_kv_count(out, layout, len(layout.kv_spans) + (0 if chooser.chance(1, 3) else 1))
        else:  # the value's bytes replaced by random ones of the same length
            blob = chooser.blob(end - start)
            out[start:start + len(blob)] = blob
    else:  # garbage between the header and the data, or appended
        at = chooser.pick((layout.header_end, len(data)))
        out[at:at] = chooser.blob(64)
    return bytes(out)


def _set_kv_count(out: bytearray, layout: GGUFLayout, count: int) -> None:
    out[16:24] = struct.pack("<Q", max(0, count))


# --- PyTorch zip checkpoints ------------------------------------------------------------------------------------


def mutate_torch_zip(chooser: Chooser, data: bytes) -> bytes:
    """A torch.save zip archive with one member damaged: the pickle (byte flips, truncation, opcodes), a storage
    (truncated, grown), the version or byteorder record; or the zip structure itself cut."""
    source = zipfile.ZipFile(io.BytesIO(data))
    members = [(info, source.read(info)) for info in source.infolist()]
    if chooser.chance(1, 6):  # damage the archive itself
        return mutate_text(chooser, data)
    index = chooser.below(len(members))
    info, payload = members[index]
    if info.filename.endswith(".pkl"):
        op = chooser.below(4)
        if op == 0:
            payload = mutate_text(chooser, payload)
        elif op == 1:  # swap a pickle opcode for a dangerous or nonsensical one
            at = chooser.below(len(payload))
            payload = payload[:at] + chooser.pick((b"c", b"R", b"\x93", b"b", b"i", b"o", b"(", b".", b"}", b"]",
                                                   b"\x8c\xff", b"J\xff\xff\xff\x7f")) + payload[at + 1:]
        elif op == 2:  # storage sizes that lie: rewrite every small integer literal K (BININT1) to a huge one
            payload = payload.replace(b"K\x08", b"J\xff\xff\xff\x7f", chooser.below(3) + 1)
        else:
            payload = payload[:chooser.below(len(payload) + 1)]
    elif chooser.chance(1, 2):
        payload = payload[:chooser.below(len(payload) + 1)]
    else:
        payload = payload + chooser.blob(64) if chooser.chance(1, 2) else mutate_text(chooser, payload)
    members[index] = (info, payload)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for info, payload in members:
            archive.writestr(info.filename, payload)
    return buffer.getvalue()


# --- tokenizer pipelines: decoder and normalizer steps, counts and string lengths --------------------------------

STEP_COUNTS = (0, 1, 2, 31, 32, 33, 100, 1_000, 10_002)
STEP_REPEATS = (0, 1, 2, 3, 2**16, 2**31 - 1, 2**32, 10**18, 2**63 - 1, 2**64 - 1)
STRING_LENGTHS = (0, 1, 2, 64, 1_000, 65_537, 300_000)


def _long_text(chooser: Chooser) -> str:
    return chooser.pick(("X", "▁", "Ġ", " ", "ab", "\u009b", "<0x41>")) * chooser.pick(STRING_LENGTHS)


def _decoder_step(chooser: Chooser) -> dict:
    kind = chooser.below(7)
    if kind == 0:
        return {"type": "Replace", "pattern": {"String": chooser.pick(("▁", "Ġ", "a", " ", "X"))},
                "content": _long_text(chooser)}
    if kind == 1:
        return {"type": "Strip", "content": chooser.pick((" ", "▁", "a", "X")), "start": chooser.pick(STEP_REPEATS),
                "stop": chooser.pick(STEP_REPEATS)}
    if kind == 2:
        return {"type": "Fuse"}
    if kind == 3:
        return {"type": "ByteFallback"}
    if kind == 4:
        return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    if kind == 5:
        return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"type": "BPEDecoder", "suffix": chooser.pick(("</w>", "", "a" * chooser.pick(STRING_LENGTHS)))}


def _normalizer_step(chooser: Chooser) -> dict:
    kind = chooser.below(5)
    if kind == 0:
        return {"type": "Prepend", "prepend": _long_text(chooser)}
    if kind == 1:
        return {"type": "Replace", "pattern": {"String": chooser.pick(("a", " ", "e", "1"))},
                "content": _long_text(chooser)}
    if kind == 2:
        return {"type": "Strip", "strip_left": chooser.chance(1, 2), "strip_right": chooser.chance(1, 2)}
    if kind == 3:
        return {"type": chooser.pick(("NFC", "NFKC", "NFD", "NFKD", "Lowercase"))}
    return {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}] * chooser.pick(STEP_COUNTS)}


def mutate_pipeline(chooser: Chooser, document: dict) -> dict:
    """Replace the decoder or the normalizer (or both) with steps of hostile counts and string lengths: a Sequence of
    up to 10,002 steps, Strip counts up to 2⁶⁴ − 1, replacements and prepends of up to 300,000 characters; the
    existing step is kept inside the Sequence as often as not."""
    for name, make, key in (("decoder", _decoder_step, "decoders"), ("normalizer", _normalizer_step, "normalizers")):
        if not chooser.chance(2, 3):
            continue
        count = chooser.pick(STEP_COUNTS)
        if count > 33:  # many copies of one step, as a file of many steps is written
            steps = [make(chooser)] * count
        else:
            steps = [make(chooser) for _ in range(count)]
        if document.get(name) and chooser.chance(1, 2):
            steps.insert(chooser.below(len(steps) + 1), document[name])
        document[name] = steps[0] if len(steps) == 1 and chooser.chance(1, 2) else {"type": "Sequence", key: steps}
    return document
