"""Translation between two different tokenizers: which tokens stand for the same bytes (the token-level intersection).

A pair whose ids mean different things can still run speculative decoding *translated* (Timor et al., "Lossless
speculative decoding algorithms for heterogeneous vocabularies", ICML 2025): the draft proposes only tokens that
stand for the same bytes in both vocabularies, each is mapped to the target's id, and the target verifies as usual.
This module computes that intersection from the two profiles, as data the decoder consumes.

**What a token stands for on its own** is read from the tokenizer's *decoder*, the component that turns ids back
into text, applied to that token alone:

- ``ByteLevel`` (GPT-2, Qwen, Llama 3, tiktoken and Tekken conversions): every character is one byte of GPT-2's
  byte↔unicode table (:func:`byte_level_alphabet`); a token with a character outside the table stands for its UTF-8
  text, as the `tokenizers` library decodes it;
- ``Metaspace`` and ``Replace('▁' → ' ')`` (SentencePiece conversions): ``▁`` is a space, and with ``ByteFallback``
  a ``<0xNN>`` token is that one byte;
- ``Strip`` before any ``Fuse`` strips every token; after a ``Fuse`` (or a ``ByteLevel``, which fuses) it only trims
  the start of the whole text, as does ``Metaspace``'s prefix handling: a sequence edge, not a property of a token;
- ``BPEDecoder``: the end-of-word suffix is a space.

Byte strings are :class:`bytes`, never :class:`str`: a byte-level token may be an incomplete UTF-8 sequence.
A ``WordPiece`` model or decoder (``##`` continuations), a ``CTC`` decoder, no decoder at all (the library then joins
tokens with spaces) or a decoder step this module does not read leave a tokenizer *not translatable*, with the reason.

Only the *regular* vocabulary (the model's vocabulary, less the ids that added tokens take) is matched by bytes.
Added and special tokens are matched by role (eos ↔ eos, bos ↔ bos, unk, pad), then by equal content. When one side
has several tokens for the same bytes (SentencePiece's ``<0x41>`` and ``A``), the tokens of each side are ranked —
ordinary tokens before byte-fallback tokens, then by id — and paired in that order; the rest are reported as
duplicates. Every mapping is one-to-one.
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import operator
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from .profile import ModelProfile, TokenizerProfile

SHOW = 5  # examples named in a message
ROLE_ORDER = ("eos", "bos", "unk", "pad")  # precedence when two roles name the same token

# ByteFallback turns a token of exactly six bytes "<0x" + two characters u8::from_str_radix reads in base 16 + ">"
# into that byte (Rust's from_str_radix accepts a leading "+", so "<0x+A>" is byte 0x0A).
_BYTE_TOKEN = re.compile(r"<0x(?:[0-9A-Fa-f]{2}|\+[0-9A-Fa-f])>")

Step = tuple  # ("replace", old, new) | ("byte-fallback",) | ("byte-level",) | ("strip", content, start, stop)


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
    for part in _flatten(decoder):
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
    return kind, tuple(steps), None


def _flatten(decoder: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    if decoder.get("type") == "Sequence":
        for part in decoder.get("decoders") or ():
            yield from _flatten(part)
    else:
        yield decoder


def _convert(strings: Sequence[str], steps: Sequence[Step]) -> tuple[list[bytes], list[int]]:
    """Apply the decoder steps to every token on its own, step by step over the whole list; return the bytes and the
    positions of tokens that a ByteFallback step turned into a byte."""
    values: list[str | bytes] = list(strings)
    fallback: list[int] = []
    for step in steps:
        kind = step[0]
        if kind == "replace":
            old, new = step[1], step[2]
            old_b, new_b = old.encode("utf-8"), new.encode("utf-8")
            values = [v.replace(old, new) if type(v) is str else v.replace(old_b, new_b) for v in values]
        elif kind == "byte-fallback":
            for k, v in enumerate(values):
                if type(v) is str and len(v) == 6 and v.startswith("<0x") and _BYTE_TOKEN.fullmatch(v):
                    values[k] = bytes([int(v[3:5], 16)])
                    fallback.append(k)
        elif kind == "byte-level":
            values = _byte_level_all(values)
        elif kind == "strip":
            values = [_strip(v, step[1], step[2], step[3]) for v in values]
    return [v.encode("utf-8") if type(v) is str else v for v in values], fallback


def _byte_level_all(values: list[str | bytes]) -> list[str | bytes]:
    """The ByteLevel step on every token: one encoding of the joined text cut at the tokens' lengths (every table
    character is one byte), else token by token."""
    if all(type(v) is str for v in values) and _outside_byte_level().search("".join(values)) is None:  # type: ignore
        data = codecs.charmap_encode("".join(values), "strict", _byte_level_codec())[0]  # type: ignore[arg-type]
        ends = list(itertools.accumulate(map(len, values)))
        return [data[a:b] for a, b in zip([0, *ends], ends)]
    return [_byte_level(v) if type(v) is str else v for v in values]


def _strip(value: str | bytes, content: str, start: int, stop: int) -> str | bytes:
    """The Strip decoder on one token: up to ``start`` leading and ``stop`` trailing ``content`` characters."""
    unit: str | bytes = content if type(value) is str else content.encode("utf-8")
    if not unit:
        return value
    begin, end = 0, len(value)
    for _ in range(start):
        if value.startswith(unit, begin, end):  # type: ignore[arg-type]
            begin += len(unit)
    for _ in range(stop):
        if end - len(unit) >= begin and value[end - len(unit):end] == unit:
            end -= len(unit)
    return value[begin:end]


def _pure_byte_level(vocab: VocabBytes) -> bool:
    """True when strings compare as their bytes do: a lone ByteLevel step and every regular character in the table
    (the table is then a bijection between the strings and the byte strings)."""
    if vocab.steps != (("byte-level",),):
        return False
    return _outside_byte_level().search("".join(_strings(vocab))) is None


@lru_cache(maxsize=1)
def _outside_byte_level() -> re.Pattern[str]:
    """A character that is not in the byte-level table (a regex scan is ~5× faster than encoding)."""
    return re.compile("[^" + re.escape(byte_level_alphabet()) + "]")


def _strings(vocab: VocabBytes) -> list[str]:
    """The regular tokens' strings, in id order."""
    if not vocab.regular:
        return []
    found = operator.itemgetter(*vocab.regular)(vocab.tokens)
    return [found] if len(vocab.regular) == 1 else list(found)


# --- two tokenizers -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Intersection:
    """The shared tokens of two tokenizers, whatever models carry them.

    ``target_ids[k]`` and ``draft_ids[k]`` are one pair of regular tokens that stand for the same bytes, sorted by
    target id (``torch.tensor(target_ids)`` gives an index tensor). ``added_pairs`` pairs added tokens with the same
    content. ``target_duplicates`` / ``draft_duplicates`` list byte strings that several regular ids of one side
    stand for, with those ids in pairing order. ``reason`` says why the pair is not translatable (then no pairs).
    """

    target: VocabBytes
    draft: VocabBytes
    target_ids: tuple[int, ...]
    draft_ids: tuple[int, ...]
    added_pairs: tuple[tuple[int, int], ...]
    target_duplicates: tuple[tuple[bytes, tuple[int, ...]], ...]
    draft_duplicates: tuple[tuple[bytes, tuple[int, ...]], ...]
    reason: str | None

    @property
    def translatable(self) -> bool:
        return self.reason is None

    @property
    def shared_tokens(self) -> int:
        return len(self.target_ids)


_INTERSECTIONS: weakref.WeakKeyDictionary[TokenizerProfile, weakref.WeakKeyDictionary[TokenizerProfile, Intersection]] \
    = weakref.WeakKeyDictionary()


def intersect(target: TokenizerProfile, draft: TokenizerProfile) -> Intersection:
    """The regular tokens that stand for the same bytes in both tokenizers, and added tokens of equal content."""
    by_draft = _INTERSECTIONS.setdefault(target, weakref.WeakKeyDictionary())
    found = by_draft.get(draft)
    if found is None:
        found = by_draft[draft] = _intersect(target, draft)
    return found


def _intersect(target: TokenizerProfile, draft: TokenizerProfile) -> Intersection:
    t_vocab, d_vocab = vocab_bytes(target), vocab_bytes(draft)
    added_pairs = _added_pairs(target, draft)
    reason = None
    if not t_vocab.translatable:
        reason = f"the target's tokenizer is not translatable: {t_vocab.reason}"
    elif not d_vocab.translatable:
        reason = f"the draft's tokenizer is not translatable: {d_vocab.reason}"
    if reason is not None:
        return Intersection(t_vocab, d_vocab, (), (), added_pairs, (), (), reason)
    if t_vocab.steps == d_vocab.steps and t_vocab.regular == d_vocab.regular and target.tokens == draft.tokens:
        # the same strings at the same ids, read by the same decoder steps (tokenizers that differ elsewhere): every
        # regular id pairs with itself, which is also what ranking duplicates pairs
        duplicates = () if _pure_byte_level(t_vocab) else _duplicates(_groups(t_vocab))
        return Intersection(t_vocab, d_vocab, t_vocab.regular, d_vocab.regular, added_pairs, duplicates, duplicates,
                            None)
    if _pure_byte_level(t_vocab) and _pure_byte_level(d_vocab):
        t_ids, d_ids = _match_strings(t_vocab, d_vocab, draft)
        return Intersection(t_vocab, d_vocab, t_ids, d_ids, added_pairs, (), (), None)
    t_groups, d_groups = _groups(t_vocab), _groups(d_vocab)
    pairs: list[tuple[int, int]] = []
    for key, ids in t_groups.items():
        other = d_groups.get(key)
        if other is not None:
            pairs += zip(ids, other)
    pairs.sort()
    return Intersection(
        t_vocab, d_vocab, tuple(t for t, _ in pairs), tuple(d for _, d in pairs), added_pairs,
        _duplicates(t_groups), _duplicates(d_groups), None)


def _match_strings(target: VocabBytes, draft: VocabBytes, draft_profile: TokenizerProfile
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Pairs by equal strings, for two pure byte-level vocabularies (where equal strings are equal bytes)."""
    found = list(map(draft_profile.regular_ids.get, _strings(target)))
    keep = list(map(operator.is_not, found, itertools.repeat(None)))
    # the model vocabulary's id, unless an added token took that id (then it is no regular token of the draft)
    taken = {token.id for token in draft_profile.added}
    if not taken.isdisjoint(found):
        keep = [k and d not in taken for k, d in zip(keep, found)]
    return tuple(itertools.compress(target.regular, keep)), tuple(itertools.compress(found, keep))


def _groups(vocab: VocabBytes) -> dict[bytes, list[int]]:
    """Byte string to the regular ids that stand for it, in pairing order: ordinary tokens before byte-fallback
    tokens, then by id."""
    table, fallback = vocab.table, vocab.byte_fallback_ids
    groups: dict[bytes, list[int]] = {}
    late: list[int] = []
    for i in vocab.regular:
        if i in fallback:
            late.append(i)
            continue
        value = table[i]
        found = groups.get(value)  # type: ignore[arg-type]
        if found is None:
            groups[value] = [i]  # type: ignore[index]
        else:
            found.append(i)
    for i in late:
        groups.setdefault(table[i], []).append(i)  # type: ignore[arg-type]
    return groups


def _duplicates(groups: Mapping[bytes, list[int]]) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
    found = [(value, tuple(ids)) for value, ids in groups.items() if len(ids) > 1]
    found.sort(key=lambda item: item[1][0])
    return tuple(found)


def _added_pairs(target: TokenizerProfile, draft: TokenizerProfile) -> tuple[tuple[int, int], ...]:
    contents = {token.content: token.id for token in reversed(draft.added)}  # the lowest id of a content wins
    pairs, used = [], set()
    for token in target.added:
        d = contents.get(token.content)
        if d is not None and d not in used:
            pairs.append((token.id, d))
            used.add(d)
    return tuple(pairs)


# --- two models ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolePair:
    """One special-token role on both sides (``None`` where a side has no such token, or it is not in its vocab)."""

    role: str
    target_id: int | None
    target_content: str | None
    draft_id: int | None
    draft_content: str | None

    @property
    def mapped(self) -> bool:
        return self.target_id is not None and self.draft_id is not None


@dataclass(frozen=True, eq=False)
class Translation:
    """How a draft runs translated for a target: everything the decoder needs.

    - ``intersection``: the tokenizer-level :class:`Intersection` (regular pairs by bytes, added pairs by content);
    - ``roles``: the special-token roles on both sides, in ``ROLE_ORDER`` (eos, bos, unk, pad);
    - :attr:`pairs`: the one-to-one map the decoder uses, as two aligned tuples (target ids, draft ids) sorted by
      target id: mapped roles first, then added tokens of equal content, then the regular pairs, each skipped when
      one of its ids is already taken;
    - :meth:`target_bytes`: the bytes of a sequence of target regular ids, to re-encode for the draft.

    **Re-encoding target text for the draft** (what the decoder does after the target accepts or resamples a token
    the draft did not propose): take the bytes of the new target ids (:meth:`target_bytes`; a special or added
    token maps through :attr:`pairs` instead), decode them as UTF-8 keeping an incomplete trailing sequence pending
    until the next token completes it, and encode the text with the draft's own `tokenizers.Tokenizer`
    (``draft_profile.source.tokenizer``, built once per process and shared with `compare`'s probe) with
    ``add_special_tokens=False``. Token boundaries can differ from what the draft would have produced for the whole
    text; that costs acceptance, never correctness: only the pairs' draft ids are ever proposed.
    """

    intersection: Intersection
    roles: tuple[RolePair, ...]
    target_assigned: int
    target_tokens: tuple[str | None, ...] = ()

    @property
    def translatable(self) -> bool:
        return self.intersection.translatable

    @property
    def reason(self) -> str | None:
        """Why the pair cannot run translated; ``None`` when it can."""
        return self.intersection.reason

    @property
    def shared_tokens(self) -> int:
        """Regular tokens that stand for the same bytes on both sides (one-to-one pairs)."""
        return self.intersection.shared_tokens

    @property
    def target_regular(self) -> int:
        return len(self.intersection.target.regular)

    @property
    def draft_regular(self) -> int:
        return len(self.intersection.draft.regular)

    @property
    def target_share(self) -> float:
        """The shared tokens as a fraction of the target's regular vocabulary."""
        return self.shared_tokens / self.target_regular if self.target_regular else 0.0

    @property
    def draft_share(self) -> float:
        return self.shared_tokens / self.draft_regular if self.draft_regular else 0.0

    @cached_property
    def pairs(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(target ids, draft ids): the one-to-one map a translated draft uses, sorted by target id; empty when the
        pair is not translatable."""
        if not self.translatable:
            return (), ()
        taken_t: set[int] = set()
        taken_d: set[int] = set()
        extra: list[tuple[int, int]] = []
        candidates = [(r.target_id, r.draft_id) for r in self.roles if r.mapped] + list(self.intersection.added_pairs)
        for t, d in candidates:
            if t not in taken_t and d not in taken_d:
                extra.append((t, d))  # type: ignore[arg-type]
                taken_t.add(t)  # type: ignore[arg-type]
                taken_d.add(d)  # type: ignore[arg-type]
        inter = self.intersection
        if not extra:
            return inter.target_ids, inter.draft_ids
        target_ids, draft_ids = list(inter.target_ids), list(inter.draft_ids)
        if not (taken_t.isdisjoint(target_ids) and taken_d.isdisjoint(draft_ids)):  # a role held by a regular token
            keep = [t not in taken_t and d not in taken_d for t, d in zip(target_ids, draft_ids)]
            target_ids = list(itertools.compress(target_ids, keep))
            draft_ids = list(itertools.compress(draft_ids, keep))
        for t, d in sorted(extra, reverse=True):  # a few ids into a sorted list
            at = bisect.bisect_left(target_ids, t)
            target_ids.insert(at, t)
            draft_ids.insert(at, d)
        return tuple(target_ids), tuple(draft_ids)

    @cached_property
    def _mapped_targets(self) -> frozenset[int]:
        return frozenset(self.pairs[0])

    @property
    def role_map(self) -> dict[str, tuple[int | None, int | None]]:
        return {r.role: (r.target_id, r.draft_id) for r in self.roles}

    @cached_property
    def target_unreachable(self) -> tuple[int, ...]:
        """Target ids (regular and added) that a translated draft can never propose: none of its tokens maps there."""
        mapped = self._mapped_targets
        return tuple(i for i, token in enumerate(self.target_tokens) if token is not None and i not in mapped)

    @property
    def target_unreachable_count(self) -> int:
        return self.target_assigned - len(self.pairs[0])

    def target_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes that a sequence of target regular ids stands for (see the class docstring for re-encoding)."""
        return self.intersection.target.bytes_of(ids)

    def draft_bytes(self, ids: Iterable[int]) -> bytes:
        return self.intersection.draft.bytes_of(ids)


def translate(target: ModelProfile, draft: ModelProfile, intersection: Intersection | None = None) -> Translation:
    """The translation of ``draft`` for ``target``; ``intersection`` reuses a tokenizer-level result."""
    if intersection is None:
        intersection = intersect(target.tokenizer, draft.tokenizer)
    roles = []
    for role in ROLE_ORDER:
        a, b = target.specials.role(role), draft.specials.role(role)
        roles.append(RolePair(role, _role_id(target, a), a.content if a is not None else None,
                              _role_id(draft, b), b.content if b is not None else None))
    return Translation(intersection=intersection, roles=tuple(roles), target_assigned=target.tokenizer.assigned,
                       target_tokens=target.tokenizer.tokens)


def _role_id(profile: ModelProfile, token) -> int | None:
    """The id of a role's token when the tokenizer defines it (a config may name an id the tokenizer lacks)."""
    if token is None or token.id is None or profile.tokenizer.token(token.id) is None:
        return None
    return token.id


# --- messages -----------------------------------------------------------------------------------------------------


def describe_bytes(value: bytes) -> str:
    """A byte string for a message: its text when it is UTF-8, else Python's bytes notation."""
    try:
        return repr(value.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(value)


def unreachable_examples(translation: Translation, limit: int = SHOW) -> list[tuple[int, str]]:
    """The first target ids a translated draft can never propose, with their token strings."""
    if not translation.target_unreachable_count:
        return []
    mapped = translation._mapped_targets
    tokens = translation.target_tokens
    found = (i for i, token in enumerate(tokens) if token is not None and i not in mapped)
    return [(i, tokens[i]) for i in itertools.islice(found, limit)]  # type: ignore[misc]
