"""How the id→string maps of a target and a draft tokenizer line up, id by id."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass

from .tokenizer import TokenizerProfile, is_placeholder

# Every alternative of tokenizer.PLACEHOLDER opens with "<" or "[" (tests/test_translation.py checks it): a cheap test
# before the regular expression, on vocabularies that differ at every id. "" is in every string, so it is kept.
PLACEHOLDER_START = "<["


@dataclass(frozen=True)
class VocabMatch:
    """How the id→string maps of target and draft line up, id by id."""

    target_size: int
    draft_size: int
    shared: int
    shared_ranges: tuple[tuple[int, int], ...]
    conflicts: tuple[tuple[int, str, str], ...]
    renamed: tuple[tuple[int, str | None, str | None], ...]
    target_only: tuple[tuple[int, str], ...]
    draft_only: tuple[tuple[int, str], ...]
    padding: tuple[tuple[int, str, str], ...]  # (id, "target"/"draft", token): placeholders only one side has
    moved: tuple[tuple[str, int, int], ...]
    first_divergent_id: int | None


def match_vocab(target: TokenizerProfile, draft: TokenizerProfile) -> VocabMatch:
    # Whole-list operations and plain dicts: two unrelated 150k-250k vocabularies differ at nearly every id, and a
    # Python-level step per id (or a ChainMap lookup per string) costs seconds there.
    tt, dt = target.tokens, draft.tokens
    common = min(len(tt), len(dt))
    if tt[:common] == dt[:common]:
        differing: list[int] = []
    else:
        differing = list(itertools.compress(range(common), map(operator.ne, tt, dt)))
    conflicts: list[tuple[int, str, str]] = []
    renamed, target_only, draft_only = [], [], []
    t_at, d_at = [tt[i] for i in differing], [dt[i] for i in differing]
    # ids where a side has no token or may hold a placeholder get a closer look; every other one is a conflict
    closer = [a is None or b is None or a[:1] in PLACEHOLDER_START or b[:1] in PLACEHOLDER_START
              for a, b in zip(t_at, d_at)]
    for i, a, b in itertools.compress(zip(differing, t_at, d_at), closer):
        if a is None:
            draft_only.append((i, b))
        elif b is None:
            target_only.append((i, a))
        elif is_placeholder(a) or is_placeholder(b):
            renamed.append((i, a, b))
        else:
            conflicts.append((i, a, b))
    if conflicts:
        conflicts += itertools.compress(zip(differing, t_at, d_at), map(operator.not_, closer))
        conflicts.sort()
    else:
        conflicts = list(itertools.compress(zip(differing, t_at, d_at), map(operator.not_, closer)))
    target_only += [(i, tt[i]) for i in range(common, len(tt)) if tt[i] is not None]
    draft_only += [(i, dt[i]) for i in range(common, len(dt)) if dt[i] is not None]
    # placeholders that only one side lists (llama.cpp pads GGUF token lists with [PAD123]) are padding rows
    t_flags = [t[:1] in PLACEHOLDER_START and is_placeholder(t) for _, t in target_only]
    d_flags = [t[:1] in PLACEHOLDER_START and is_placeholder(t) for _, t in draft_only]
    padding = sorted([(i, "target", t) for i, t in itertools.compress(target_only, t_flags)]
                     + [(i, "draft", t) for i, t in itertools.compress(draft_only, d_flags)])
    target_only = list(itertools.compress(target_only, map(operator.not_, t_flags)))
    draft_only = list(itertools.compress(draft_only, map(operator.not_, d_flags)))

    moved: list[tuple[str, int, int]] = []
    if conflicts or target_only or draft_only:
        t_ids, d_ids = _string_ids(target), _string_ids(draft)
        ids = sorted([i for i, _, _ in conflicts] + [i for i, _ in target_only])
        strings = [tt[i] for i in ids]
        if list(map(t_ids.__getitem__, strings)) == ids:  # each string at its own id: distinct and in order
            ordered: Iterator[tuple[int, str]] = zip(ids, strings)
        else:  # a string at two ids (Unigram), or one an added token shadows: order by the id it maps to
            ordered = iter(sorted((t_ids[string], string) for string in set(strings)))
        ordered_list = list(ordered)
        found = map(d_ids.get, [string for _, string in ordered_list])
        moved = [(string, t_id, d_id) for (t_id, string), d_id in zip(ordered_list, found)
                 if d_id is not None and d_id != t_id]

    # ids both sides define with the same string, as [start, end) ranges: the gaps between the ids that differ or
    # that neither side defines
    ranges: list[tuple[int, int]] = []
    if not differing and None not in tt[:common]:
        ranges = [(0, common)] if common else []
    elif common:
        unused = list(itertools.compress(range(common), map(operator.is_, tt[:common], itertools.repeat(None))))
        breaks = sorted(set(differing).union(unused)) if unused else differing
        ranges = [(begin, end) for begin, end in zip([0, *(i + 1 for i in breaks)], [*breaks, common])
                  if end > begin]
    shared = sum(end - begin for begin, end in ranges)
    # an id in differing has a string on at least one side; every one of them is below common
    first_divergent = differing[0] if differing else (common if len(tt) != len(dt) else None)
    return VocabMatch(
        target_size=len(tt), draft_size=len(dt), shared=shared, shared_ranges=tuple(ranges),
        conflicts=tuple(conflicts), renamed=tuple(renamed), target_only=tuple(target_only),
        draft_only=tuple(draft_only), padding=tuple(padding), moved=tuple(moved),
        first_divergent_id=first_divergent,
    )


def _string_ids(tokenizer: TokenizerProfile) -> dict[str, int]:
    """String to id as :attr:`TokenizerProfile.ids` maps it (an added token wins), as a plain dict."""
    ids = dict(tokenizer.regular_ids)
    ids.update((added.content, added.id) for added in tokenizer.added)
    return ids
