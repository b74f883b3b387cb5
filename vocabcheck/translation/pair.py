"""Two models: the special roles on both sides and the one-to-one map a translated draft uses."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from ..profile import ModelProfile
from .intersection import Intersection, intersect

SHOW = 5  # examples named in a message
ROLE_ORDER = ("eos", "bos", "unk", "pad")  # precedence when two roles name the same token


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
    (``draft_profile.source.tokenizer``, built once per process and shared with the probe of `run`'s own
    comparison) with ``add_special_tokens=False``. Token boundaries can differ from what the draft would have
    produced for the whole text; that costs acceptance, never correctness: only the pairs' draft ids are ever
    proposed.
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

    def drop_tables(self) -> None:
        """Forget the id tables computed for this pair (``pairs``, the mapped and unreachable targets: about 2.6 MB
        for two 150k vocabularies); they are computed again if asked for. A report over many pairs (gate, matrix)
        calls this once a pair's findings are made, so that its memory grows with the distinct models, not the pairs."""
        for name in ("pairs", "_mapped_targets", "target_unreachable"):
            self.__dict__.pop(name, None)

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
