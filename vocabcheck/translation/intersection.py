"""Two tokenizers: the regular tokens that stand for the same bytes, and added tokens of equal content."""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

from ..tokenizer import TokenizerProfile
from .vocab import DecoderTooCostly, VocabBytes, pure_byte_level, regular_strings, vocab_bytes


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
    for side, vocab in (("target", t_vocab), ("draft", d_vocab)):
        try:
            if not pure_byte_level(vocab):
                vocab.table  # noqa: B018  (converted now, so that a decoder over its caps is named by its side)
        except DecoderTooCostly as exc:
            exc.side = side
            raise
    if t_vocab.steps == d_vocab.steps and t_vocab.regular == d_vocab.regular and target.tokens == draft.tokens:
        # the same strings at the same ids, read by the same decoder steps (tokenizers that differ elsewhere): every
        # regular id pairs with itself, which is also what ranking duplicates pairs
        duplicates = () if pure_byte_level(t_vocab) else _duplicates(_groups(t_vocab))
        return Intersection(t_vocab, d_vocab, t_vocab.regular, d_vocab.regular, added_pairs, duplicates, duplicates,
                            None)
    if pure_byte_level(t_vocab) and pure_byte_level(d_vocab):
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
    found = list(map(draft_profile.regular_ids.get, regular_strings(target)))
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
