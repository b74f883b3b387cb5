"""One tokenizer's regular vocabulary as bytes: what each token stands for on its own, read from the decoder."""

from __future__ import annotations

import codecs
import itertools
import operator
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from ..errors import InputError
from ..limits import TOKEN_BYTES_ENV, cap_from_env, max_token_bytes
from ..tokenizer import TokenizerProfile

# ByteFallback turns a token of exactly six bytes "<0x" + two characters u8::from_str_radix reads in base 16 + ">"
# into that byte (Rust's from_str_radix accepts a leading "+", so "<0x+A>" is byte 0x0A).
_BYTE_TOKEN = re.compile(r"<0x(?:[0-9A-Fa-f]{2}|\+[0-9A-Fa-f])>")

Step = tuple  # ("replace", old, new) | ("byte-fallback",) | ("byte-level",) | ("strip", content, start, stop)

# What reading a decoder may cost: steps that act on each token, one token's decoded length, all tokens' together
# (docs/hostile-input.md). Real decoders have up to ~6 steps and tokens of up to a few hundred bytes.
MAX_DECODER_STEPS = 32
DECODER_STEPS_ENV = "VOCABCHECK_MAX_DECODER_STEPS"
MAX_DECODED_BYTES = 256 * 1024 * 1024
DECODED_BYTES_ENV = "VOCABCHECK_MAX_DECODED_BYTES"


def max_decoder_steps() -> int:
    return cap_from_env(DECODER_STEPS_ENV, MAX_DECODER_STEPS, "steps")


def max_decoded_bytes() -> int:
    return cap_from_env(DECODED_BYTES_ENV, MAX_DECODED_BYTES, "bytes")


class DecoderTooCostly(InputError):
    """Reading a tokenizer's decoder would go over one of the caps above; ``side`` is "target" or "draft" once the
    intersection knows it (the command line adds the file)."""

    side: str | None = None


@lru_cache(maxsize=1)
def byte_level_alphabet() -> str:
    """GPT-2's byte↔unicode table as a 256-character string: character ``b`` stands for byte ``b``.

    The table of GPT-2's ``bytes_to_unicode`` (openai/gpt-2 ``encoder.py``), which the `tokenizers` library's
    ``ByteLevel`` and transformers use: the 188 printable bytes ``!``..``~``, ``¡``..``¬`` and ``®``..``ÿ`` stand for
    themselves; the other 68 bytes, in byte order, for U+0100 onwards.
    """
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    shifted = iter(range(0x100, 0x200))
    return "".join(chr(b) if b in printable else chr(next(shifted)) for b in range(256))


@lru_cache(maxsize=1)
def _byte_level_codec():
    return codecs.charmap_build(byte_level_alphabet())


def _byte_level(text: str) -> bytes:
    """One byte-level token's bytes; a token with a character outside the table stands for its UTF-8 text (what
    the `tokenizers` library's ByteLevel decoder does)."""
    try:
        return codecs.charmap_encode(text, "strict", _byte_level_codec())[0]
    except UnicodeEncodeError:
        return text.encode("utf-8")


# --- one tokenizer ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class VocabBytes:
    """What every regular token of one tokenizer stands for on its own, as bytes.

    ``kind`` is ``"byte-level"``, ``"sentencepiece"`` (``▁`` as a space, maybe ``<0xNN>`` byte tokens) or ``"text"``
    (tokens stand for their text, after the decoder's replacements); ``None`` when the tokenizer is not translatable,
    and then ``reason`` says why. ``regular`` lists the regular ids in ascending order; ``steps`` is the decoder as
    applied to one token.
    """

    kind: str | None
    reason: str | None
    steps: tuple[Step, ...]
    regular: tuple[int, ...]
    tokens: tuple[str | None, ...] = ()

    @property
    def translatable(self) -> bool:
        return self.kind is not None

    @cached_property
    def _converted(self) -> tuple[tuple[bytes | None, ...], frozenset[int]]:
        table: list[bytes | None] = [None] * len(self.tokens)
        if not self.translatable:
            return tuple(table), frozenset()
        values, fallback = _convert([self.tokens[i] for i in self.regular], self.steps)  # type: ignore[misc]
        for i, value in zip(self.regular, values):
            table[i] = value
        return tuple(table), frozenset(self.regular[k] for k in fallback)

    @property
    def table(self) -> tuple[bytes | None, ...]:
        """Bytes by id: ``table[i]`` for a regular id, ``None`` for an added token or an unused id."""
        return self._converted[0]

    @property
    def byte_fallback_ids(self) -> frozenset[int]:
        """Regular ids that are ``<0xNN>`` byte tokens read by a ByteFallback decoder step."""
        return self._converted[1]

    def bytes_of(self, ids: Iterable[int]) -> bytes:
        """The bytes a sequence of regular ids stands for, concatenated. An id without standalone bytes (an added or
        special token, an unused id) raises :class:`ValueError` naming it: map those by role or content instead."""
        table = self.table
        parts = []
        for i in ids:
            value = table[i] if 0 <= i < len(table) else None
            if value is None:
                raise ValueError(f"id {i} is not a regular token of this tokenizer: it has no standalone bytes")
            parts.append(value)
        return b"".join(parts)


_VOCAB_BYTES: weakref.WeakKeyDictionary[TokenizerProfile, VocabBytes] = weakref.WeakKeyDictionary()


def vocab_bytes(tokenizer: TokenizerProfile) -> VocabBytes:
    """The byte view of one tokenizer, computed once per profile (byte strings themselves on first use)."""
    found = _VOCAB_BYTES.get(tokenizer)
    if found is None:
        found = _VOCAB_BYTES[tokenizer] = _vocab_bytes(tokenizer)
    return found


def _vocab_bytes(tokenizer: TokenizerProfile) -> VocabBytes:
    tokens = tokenizer.tokens
    defined = list(map(operator.is_not, tokens, itertools.repeat(None)))
    for token in tokenizer.added:
        defined[token.id] = False
    regular = tuple(itertools.compress(range(len(tokens)), defined))
    kind, steps, reason = _scheme(tokenizer)
    return VocabBytes(kind=kind, reason=reason, steps=steps, regular=regular, tokens=tokens)


def _scheme(tokenizer: TokenizerProfile) -> tuple[str | None, tuple[Step, ...], str | None]:
    """(kind, steps, None) for a tokenizer whose tokens have standalone bytes, else (None, (), reason)."""
    if tokenizer.model_type == "WordPiece":
        return None, (), ("a WordPiece model: a token marked '##' continues a word and any other starts one, so "
                          "what a token stands for depends on its neighbour")
    decoder = tokenizer.pipeline.get("decoder")
    if not decoder:
        return None, (), ("the tokenizer has no decoder: the tokenizers library joins tokens with spaces, so a "
                          "token has no standalone byte string")
    steps: list[Step] = []
    fused = False
    kind = "text"
    cap = max_decoder_steps()
    for part in _flatten(decoder):
        if len(steps) > cap:
            return None, (), (f"a decoder of more than {cap:,} steps that act on each token, more than vocabcheck "
                              f"reads ({DECODER_STEPS_ENV} sets another limit)")
        name = part.get("type")
        if name == "WordPiece":
            return None, (), ("a WordPiece decoder: a token marked '##' continues a word and any other starts one "
                              "with a space, so what a token stands for depends on its neighbour")
        if name == "CTC":
            return None, (), "a CTC decoder: repeated tokens collapse and pad tokens vanish in context"
        if name == "ByteLevel":
            if kind == "byte-level":
                return None, (), "a decoder with two ByteLevel steps"
            steps.append(("byte-level",))
            kind, fused = "byte-level", True
        elif name == "Metaspace":
            steps.append(("replace", part.get("replacement", "\u2581"), " "))
            kind = "sentencepiece" if kind == "text" else kind
        elif name == "Replace":
            pattern = part.get("pattern") or {}
            if "String" not in pattern:
                return None, (), "a decoder Replace step with a regular expression, which vocabcheck does not read"
            old, new = pattern["String"], part.get("content", "")
            if not old:
                return None, (), "a decoder Replace step with an empty pattern"
            steps.append(("replace", old, new))
            if old == "\u2581" and new == " " and kind == "text":
                kind = "sentencepiece"
        elif name == "ByteFallback":
            steps.append(("byte-fallback",))
        elif name == "Fuse":
            fused = True
        elif name == "Strip":
            if not fused:  # before a Fuse it strips every token; after, only the start and end of the whole text
                steps.append(("strip", part.get("content", " "), int(part.get("start", 0)), int(part.get("stop", 0))))
        elif name == "BPEDecoder":
            steps.append(("replace", part.get("suffix", "</w>"), " "))  # the last token's suffix is a sequence edge
        else:
            return None, (), f"a {name!r} decoder step, which vocabcheck does not read"
    if len(steps) > cap:
        return None, (), (f"a decoder of more than {cap:,} steps that act on each token, more than vocabcheck "
                          f"reads ({DECODER_STEPS_ENV} sets another limit)")
    return kind, tuple(steps), None


def _flatten(decoder: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    if decoder.get("type") == "Sequence":
        for part in decoder.get("decoders") or ():
            yield from _flatten(part)
    else:
        yield decoder


def _convert(strings: Sequence[str], steps: Sequence[Step]) -> tuple[list[bytes], list[int]]:
    """Apply the decoder steps to every token on its own, in one pass over the vocabulary (every step on a token, then
    the next token); return the bytes and the positions of tokens that a ByteFallback step turned into a byte.

    The work is bounded by the input: a Strip acts at most as often as its content fits in the token, and a
    replacement that would make one token longer than :func:`max_token_bytes` or all of them together longer than
    :func:`max_decoded_bytes` is refused (:class:`DecoderTooCostly`) before it is made."""
    if tuple(steps) == (("byte-level",),):  # the usual case: one encoding of the joined text, sizes kept
        return _byte_level_all(list(strings)), []  # type: ignore[return-value]
    token_cap, total_cap = max_token_bytes(), max_decoded_bytes()
    chain = [(*step, step[1].encode("utf-8"), step[2].encode("utf-8")) if step[0] == "replace" else step
             for step in steps]
    # the leading replacements that cannot lengthen a token (Metaspace, '▁' → ' ') act on text: no checks needed
    lead = 0
    while lead < len(chain) and chain[lead][0] == "replace" and len(chain[lead][2]) <= len(chain[lead][1]):
        lead += 1
    plain, chain = [(step[1], step[2]) for step in chain[:lead]], chain[lead:]
    values: list[bytes] = []
    fallback: list[int] = []
    total = 0
    for k, value in enumerate(strings):
        v: str | bytes = value
        for old, new in plain:
            v = v.replace(old, new)
        for step in chain:
            kind = step[0]
            if kind == "replace":
                old, new = (step[1], step[2]) if type(v) is str else (step[3], step[4])
                if len(new) > len(old) and old in v:  # type: ignore[operator]
                    grown = len(v) + v.count(old) * (len(new) - len(old))  # type: ignore[arg-type]
                    if grown > token_cap:
                        raise DecoderTooCostly(_too_long(value, step, grown, token_cap))
                v = v.replace(old, new)  # type: ignore[arg-type]
            elif kind == "byte-fallback":
                if type(v) is str and len(v) == 6 and v.startswith("<0x") and _BYTE_TOKEN.fullmatch(v):
                    v = bytes([int(v[3:5], 16)])
                    fallback.append(k)
            elif kind == "byte-level":
                if type(v) is str:
                    v = _byte_level(v)
            elif kind == "strip":
                v = _strip(v, step[1], step[2], step[3])
        data = v.encode("utf-8") if type(v) is str else v
        total += len(data)  # type: ignore[arg-type]
        if total > total_cap:
            raise DecoderTooCostly(f"the decoder makes the vocabulary's tokens more than {total_cap:,} bytes "
                                   f"together (after {k + 1:,} tokens); {DECODED_BYTES_ENV} sets another limit")
        values.append(data)  # type: ignore[arg-type]
    return values, fallback


def _too_long(token: str, step: Step, length: int, cap: int) -> str:
    return (f"the decoder's Replace {_clip(step[1])} → {_clip(step[2])} would make the token {_clip(token)} "
            f"{length:,} characters long, more than {cap:,}; {TOKEN_BYTES_ENV} sets another limit")


def _clip(text: str, limit: int = 30) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 2] + "…" + shown[0] + f" ({len(text):,} characters)"


def _byte_level_all(values: list[str | bytes]) -> list[str | bytes]:
    """The ByteLevel step on every token: one encoding of the joined text cut at the tokens' lengths (every table
    character is one byte), else token by token."""
    if all(type(v) is str for v in values) and _outside_byte_level().search("".join(values)) is None:  # type: ignore
        data = codecs.charmap_encode("".join(values), "strict", _byte_level_codec())[0]  # type: ignore[arg-type]
        ends = list(itertools.accumulate(map(len, values)))
        return [data[a:b] for a, b in zip([0, *ends], ends)]
    return [_byte_level(v) if type(v) is str else v for v in values]


def _strip(value: str | bytes, content: str, start: int, stop: int) -> str | bytes:
    """The Strip decoder on one token: up to ``start`` leading and ``stop`` trailing ``content`` characters (no more
    often than the content fits in the token, whatever ``start`` and ``stop`` say)."""
    unit: str | bytes = content if type(value) is str else content.encode("utf-8")
    if not unit:
        return value
    begin, end = 0, len(value)
    fits = len(value) // len(unit)
    for _ in range(min(start, fits)):
        if not value.startswith(unit, begin, end):  # type: ignore[arg-type]
            break
        begin += len(unit)
    for _ in range(min(stop, fits)):
        if end - len(unit) < begin or value[end - len(unit):end] != unit:
            break
        end -= len(unit)
    return value[begin:end]


def pure_byte_level(vocab: VocabBytes) -> bool:
    """True when strings compare as their bytes do: a lone ByteLevel step and every regular character in the table
    (the table is then a bijection between the strings and the byte strings)."""
    if vocab.steps != (("byte-level",),):
        return False
    return _outside_byte_level().search("".join(regular_strings(vocab))) is None


@lru_cache(maxsize=1)
def _outside_byte_level() -> re.Pattern[str]:
    """A character that is not in the byte-level table (a regex scan is ~5× faster than encoding)."""
    return re.compile("[^" + re.escape(byte_level_alphabet()) + "]")


def regular_strings(vocab: VocabBytes) -> list[str]:
    """The regular tokens' strings, in id order."""
    if not vocab.regular:
        return []
    found = operator.itemgetter(*vocab.regular)(vocab.tokens)
    return [found] if len(vocab.regular) == 1 else list(found)
