"""How the id→string maps of a target and a draft tokenizer line up, id by id."""

from __future__ import annotations

from dataclasses import dataclass

from .tokenizer import TokenizerProfile, is_placeholder


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
    tt, dt = target.tokens, draft.tokens
    common = min(len(tt), len(dt))
    if tt[:common] == dt[:common]:
        differing: list[int] = []
    else:
        differing = [i for i, (a, b) in enumerate(zip(tt, dt)) if a != b]
    conflicts, renamed, target_only, draft_only = [], [], [], []
    for i in differing:
        a, b = tt[i], dt[i]
        if a is None:
            draft_only.append((i, b))
        elif b is None:
            target_only.append((i, a))
        elif is_placeholder(a) or is_placeholder(b):
            renamed.append((i, a, b))
        else:
            conflicts.append((i, a, b))
    target_only += [(i, tt[i]) for i in range(common, len(tt)) if tt[i] is not None]
    draft_only += [(i, dt[i]) for i in range(common, len(dt)) if dt[i] is not None]
    # placeholders that only one side lists (llama.cpp pads GGUF token lists with [PAD123]) are padding rows
    padding = sorted([(i, "target", t) for i, t in target_only if is_placeholder(t)]
                     + [(i, "draft", t) for i, t in draft_only if is_placeholder(t)])
    target_only = [(i, t) for i, t in target_only if not is_placeholder(t)]
    draft_only = [(i, t) for i, t in draft_only if not is_placeholder(t)]

    moved: list[tuple[str, int, int]] = []
    if conflicts or target_only or draft_only:
        t_ids, d_ids = target.ids, draft.ids
        candidates = {a for _, a, _ in conflicts} | {a for _, a in target_only}
        for string in sorted(candidates, key=lambda s: t_ids[s]):
            if string in d_ids and d_ids[string] != t_ids[string]:
                moved.append((string, t_ids[string], d_ids[string]))

    # ids both sides define with the same string, as [start, end) ranges
    ranges: list[tuple[int, int]] = []
    if not differing and None not in tt[:common]:
        ranges = [(0, common)] if common else []
    bad = set(differing)
    start = None
    for i in range(common + 1) if not ranges and common else ():
        good = i < common and i not in bad and tt[i] is not None
        if good and start is None:
            start = i
        elif not good and start is not None:
            ranges.append((start, i))
            start = None
    shared = sum(end - begin for begin, end in ranges)
    divergent = [i for i in differing if tt[i] is not None or dt[i] is not None]
    if len(tt) != len(dt):
        divergent.append(common)
    return VocabMatch(
        target_size=len(tt), draft_size=len(dt), shared=shared, shared_ranges=tuple(ranges),
        conflicts=tuple(conflicts), renamed=tuple(renamed), target_only=tuple(target_only),
        draft_only=tuple(draft_only), padding=tuple(padding), moved=tuple(moved),
        first_divergent_id=min(divergent) if divergent else None,
    )
