"""The verdict on a pair, and the alignment that the decoder uses.

- **identical**: equivalent tokenizers (equal fingerprints) and equal rows.
- **padded-compatible**: every id that both models can produce means the same string (placeholders that one side
  renamed count as padding); rows may differ in either direction and one side may extend the other.
- **incompatible**: anything else — some id means different things, or a model cannot embed its own tokenizer's ids.

The :class:`Alignment` is the one place where "how do the rows line up" is answered: the decoder consumes it and
never re-derives compatibility.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from .diff import Diff, TokenizerDiffCache, diff_profiles
from .findings import CODES, Finding, Severity
from .profile import ModelProfile
from .vocab import VocabMatch


class Verdict(str, Enum):
    IDENTICAL = "identical"
    PADDED_COMPATIBLE = "padded-compatible"
    INCOMPATIBLE = "incompatible"

    @property
    def rank(self) -> int:
        """Higher is better: identical 2, padded-compatible 1, incompatible 0."""
        return {"identical": 2, "padded-compatible": 1, "incompatible": 0}[self.value]


@dataclass(frozen=True)
class Alignment:
    """How the draft's rows line up with the target's.

    A draft probability vector over ``draft_rows`` becomes one over ``target_rows`` in two steps:

    1. keep only the draft ids in ``shared_ranges`` (ids both tokenizers define with the same string) and zero the
       rest — the draft's padding rows, tokens only the draft has, placeholders the target never learned;
    2. pad with zeros up to ``target_rows`` (``mapping == "pad"``) or cut the rows beyond ``target_rows``
       (``mapping == "cut"``; those rows are never shared), then renormalise.

    A target id that the draft cannot embed (at or beyond ``draft_input_rows``: a target that extends the vocabulary,
    or a padding row the target sampled) is fed to the draft as ``draft_substitute_id``: its unk token, else its pad,
    else its eos, else 0. Ids below the draft's rows are fed as they are.
    """

    target_rows: int
    draft_rows: int
    target_input_rows: int
    draft_input_rows: int
    rows_source: str
    shared_ids: int
    shared_ranges: tuple[tuple[int, int], ...]
    mapping: str
    draft_substitute_id: int
    renamed_ids: tuple[int, ...]

    @property
    def pad_rows(self) -> int:
        return max(0, self.target_rows - self.draft_rows)

    @property
    def cut_rows(self) -> int:
        return max(0, self.draft_rows - self.target_rows)

    def draft_keep_ranges(self) -> tuple[tuple[int, int], ...]:
        """Ranges of draft rows whose probability is kept (clipped to the rows both models have)."""
        limit = min(self.target_rows, self.draft_rows)
        return tuple((a, min(b, limit)) for a, b in self.shared_ranges if a < limit)

    def substituted_ids(self) -> tuple[tuple[int, int], ...]:
        """The range of target ids the draft cannot embed, fed to it as ``draft_substitute_id``."""
        top = max(self.target_rows, self.target_input_rows)
        return ((self.draft_input_rows, top),) if top > self.draft_input_rows else ()


@dataclass(frozen=True)
class Comparison:
    target: ModelProfile
    draft: ModelProfile
    verdict: Verdict
    reason: str
    findings: tuple[Finding, ...]
    alignment: Alignment
    vocab: VocabMatch
    diff: Diff

    @property
    def first_divergent_id(self) -> int | None:
        return self.vocab.first_divergent_id

    @property
    def translation(self):
        """The :class:`vocabcheck.translation.Translation` for tokenizers that differ, else ``None``."""
        return self.diff.translation

    def worst(self) -> Severity | None:
        return min((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def failed(self, strict: bool = False, allow: Sequence[str] = ()) -> bool:
        """Exit status 1 material: incompatible, or (strict) any warning whose code is not allowed."""
        if self.verdict is Verdict.INCOMPATIBLE:
            return True
        return strict and any(f.severity is Severity.WARNING and f.code not in allow for f in self.findings)

    def top_findings(self, limit: int = 3) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity is not Severity.INFO)[:limit] or self.findings[:1]


def judge(target: ModelProfile, draft: ModelProfile, *, probe: bool = True,
          cache: TokenizerDiffCache | None = None) -> Comparison:
    """The verdict on a pair. ``cache`` (shared across calls) computes the tokenizer-level diff once per pair of
    tokenizers; the result is the same with or without it."""
    diff = diff_profiles(target, draft, probe=probe, cache=cache)
    alignment = alignment_of(target, draft, diff.vocab)
    errors = [f for f in diff.findings if f.severity is Severity.ERROR]
    t_emb, d_emb = target.embeddings, draft.embeddings
    same_rows = (t_emb.input_rows, t_emb.output_rows) == (d_emb.input_rows, d_emb.output_rows)
    if errors:
        verdict = Verdict.INCOMPATIBLE
        reason = "; ".join(f"{CODES[f.code]} ({f.code})" for f in errors[:2])
        translation = diff.translation  # ids that differ, and nothing else wrong: a translated draft can still run
        if (translation is not None and translation.translatable and translation.shared_tokens
                and not translation_blockers(errors)):
            reason += f"; the pair can run translated through {translation.shared_tokens:,} shared tokens"
    elif target.fingerprint == draft.fingerprint and same_rows:
        verdict = Verdict.IDENTICAL
        reason = "equivalent tokenizers and equal embedding rows"
        if t_emb.source == "unknown":
            reason = "equivalent tokenizers (embedding rows unknown on both sides)"
    else:
        verdict = Verdict.PADDED_COMPATIBLE
        parts = [f"every id both models can produce means the same ({alignment.shared_ids:,} shared ids)"]
        if alignment.target_rows != alignment.draft_rows:
            parts.append(f"rows {alignment.target_rows:,} (target) vs {alignment.draft_rows:,} (draft)")
        if target.fingerprint != draft.fingerprint:
            parts.append("the tokenizers differ in ways that keep ids' meanings")
        reason = "; ".join(parts)
    return Comparison(target=target, draft=draft, verdict=verdict, reason=reason, findings=diff.findings,
                      alignment=alignment, vocab=diff.vocab, diff=diff)


def translation_blockers(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """The error findings that running through shared tokens cannot get around: every error but ids that mean
    different things (``vocab.*``), e.g. a model whose tokenizer emits ids beyond its own rows, broken on its own."""
    return tuple(f for f in findings if f.severity is Severity.ERROR and not f.code.startswith("vocab."))


def alignment_of(target: ModelProfile, draft: ModelProfile, vocab: VocabMatch) -> Alignment:
    """How the draft's rows line up with the target's, given the match of their vocabularies."""
    t_rows, t_source = _rows(target)
    d_rows, d_source = _rows(draft)
    t_in = target.embeddings.input_rows or t_rows
    d_in = draft.embeddings.input_rows or d_rows
    ranges = vocab.shared_ranges  # renamed placeholders differ by string, so they are not shared
    mapping = "same" if t_rows == d_rows else ("pad" if t_rows > d_rows else "cut")
    return Alignment(
        target_rows=t_rows, draft_rows=d_rows, target_input_rows=t_in, draft_input_rows=d_in,
        rows_source=t_source if t_source == d_source else f"{t_source}/{d_source}",
        shared_ids=sum(b - a for a, b in ranges), shared_ranges=ranges, mapping=mapping,
        draft_substitute_id=_substitute(draft, d_in), renamed_ids=tuple(i for i, _, _ in vocab.renamed),
    )


def _rows(profile: ModelProfile) -> tuple[int, str]:
    emb = profile.embeddings
    if emb.rows is not None:
        return emb.rows, emb.source
    return profile.tokenizer.size, "tokenizer"


def _substitute(draft: ModelProfile, rows: int) -> int:
    for role in ("unk", "pad", "eos"):
        token = draft.specials.role(role)
        if token is not None and token.id is not None and token.id < rows:
            return token.id
    return 0
