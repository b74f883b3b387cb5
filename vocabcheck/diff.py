"""Findings between two profiles: each with a stable code, a severity and a message that names ids and strings.

The codes are part of the JSON schema and of `gate` manifests (``allow = [...]``); they never change meaning.
See :data:`CODES` for the catalogue.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .probe import ProbeResult, run_probe
from .profile import PIPELINE, ROLES, ModelProfile, TokenizerProfile, is_placeholder
from .translation import Intersection, Translation, describe_bytes, intersect, translate, unreachable_examples


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)


CODES: dict[str, str] = {
    "vocab.summary": "how the two id→string maps line up (counts, first divergent id)",
    "vocab.conflict": "ids that mean different strings in target and draft",
    "vocab.moved": "strings that sit at different ids in target and draft",
    "vocab.target-extends": "tokens only the target has; the draft never proposes them",
    "vocab.draft-extends": "tokens only the draft has; their probability is dropped",
    "vocab.placeholder-renamed": "reserved/placeholder ids that one side gave a real name",
    "vocab.padding-tokens": "placeholder tokens only one side lists (GGUF [PADn] padding): padding rows",
    "vocab.low-overlap": "the draft shares less than half of the target's ids",
    "added.flags": "the same added token with different flags (special, normalized, lstrip, rstrip, single_word)",
    "added.kind": "a token that is an added token on one side and a regular token on the other",
    "tokenizer.model-type": "different tokenizer models (BPE, Unigram, WordPiece, WordLevel)",
    "tokenizer.model-params": "different tokenizer model parameters (byte_fallback, unk_token, ignore_merges...)",
    "tokenizer.merges": "different BPE merges or merge order",
    "tokenizer.scores": "different Unigram scores",
    "pipeline.normalizer": "different normalizers",
    "pipeline.pre-tokenizer": "different pre-tokenizers",
    "pipeline.post-processor": "different post-processors",
    "pipeline.decoder": "different decoders",
    "special.bos": "different beginning-of-sequence tokens",
    "special.eos": "different end-of-sequence tokens",
    "special.pad": "different padding tokens",
    "special.unk": "different unknown tokens",
    "special.missing": "a special token that is not in its own vocabulary",
    "special.add-bos": "one tokenizer adds a token before a sequence and the other does not",
    "special.add-eos": "one tokenizer adds a token after a sequence and the other does not",
    "generation.eos": "different generation-config eos ids",
    "chat-template": "different chat templates",
    "rows.unknown": "no checkpoint: embedding rows are unknown",
    "rows.config-mismatch": "config vocab_size disagrees with the real embedding tensors",
    "rows.embed-head-mismatch": "input embedding and lm_head have different rows",
    "rows.tokenizer-overflow": "the tokenizer emits ids beyond the model's rows: the model itself is broken",
    "rows.padded": "the models have different rows; the alignment pads or cuts",
    "engine.vocab-size": "what engines that compare config.vocab_size conclude",
    "probe.encodings": "the built-in corpus encodes differently",
    "translation.intersection": "the tokens both tokenizers share by the bytes they stand for: what a translated "
                                "draft can propose",
}

SHOW = 5  # examples named in one message
# Every alternative of profile.PLACEHOLDER opens with "<" or "[" (tests/test_translation.py checks it): a cheap test
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


@dataclass(frozen=True)
class Diff:
    findings: tuple[Finding, ...]
    vocab: VocabMatch
    probe: ProbeResult | None
    translation: Translation | None = None  # for tokenizers that differ: what a translated draft can propose


@dataclass(frozen=True)
class TokenizerDiff:
    """What two tokenizers say about each other, whatever models carry them: the vocab match, the vocab, added-token,
    tokenizer-model and pipeline findings, and the probe. Equal for every pair of models with these two tokenizers."""

    vocab: VocabMatch
    findings: tuple[Finding, ...]
    probe: ProbeResult | None
    intersection: Intersection | None = None  # tokenizers that differ: the tokens they share by bytes


class TokenizerDiffCache:
    """:func:`diff_tokenizers` computed once per ordered pair of tokenizers, for callers that judge many models
    that share a few tokenizers (``gate``, ``matrix``): N models with G tokenizers cost G² tokenizer diffs, and
    every pair's findings and verdict are exactly what an uncached :func:`diff_profiles` gives.

    A tokenizer is keyed by its fingerprint and its regular-token count, the one fact the findings print that the
    fingerprint does not cover (an added token also listed in the vocab counts as regular on one side only).
    """

    def __init__(self) -> None:
        self._diffs: dict[tuple[tuple[str, int], tuple[str, int], bool], TokenizerDiff] = {}

    def __len__(self) -> int:
        """How many tokenizer diffs were computed."""
        return len(self._diffs)

    def get(self, target: ModelProfile, draft: ModelProfile, *, probe: bool = True) -> TokenizerDiff:
        key = (_tokenizer_key(target.tokenizer), _tokenizer_key(draft.tokenizer), probe)
        found = self._diffs.get(key)
        if found is None:
            found = self._diffs[key] = diff_tokenizers(target, draft, probe=probe)
        return found


def _tokenizer_key(tokenizer: TokenizerProfile) -> tuple[str, int]:
    return tokenizer.fingerprint, tokenizer.regular_count


def diff_profiles(target: ModelProfile, draft: ModelProfile, *, probe: bool = True,
                  cache: TokenizerDiffCache | None = None) -> Diff:
    """All findings between two models; ``cache`` reuses the tokenizer-level part across pairs."""
    tokenizers = (cache.get(target, draft, probe=probe) if cache is not None
                  else diff_tokenizers(target, draft, probe=probe))
    findings = list(tokenizers.findings)
    findings += _special_findings(target, draft)
    findings += _row_findings(target, draft, tokenizers.vocab)
    if tokenizers.probe is not None:
        findings.append(_probe_finding(tokenizers.probe, tokenizers.vocab))
    translation = None
    if tokenizers.intersection is not None:
        translation = translate(target, draft, tokenizers.intersection)
        findings.append(_translation_finding(translation))
    findings.sort(key=lambda f: f.severity.rank)
    return Diff(findings=tuple(findings), vocab=tokenizers.vocab, probe=tokenizers.probe, translation=translation)


def diff_tokenizers(target: ModelProfile, draft: ModelProfile, *, probe: bool = True) -> TokenizerDiff:
    """The findings that depend on the two tokenizers alone (the probe encodes with the models' tokenizers)."""
    vocab = match_vocab(target.tokenizer, draft.tokenizer)
    findings: list[Finding] = []
    findings += _vocab_findings(vocab, target.tokenizer, draft.tokenizer)
    findings += _added_findings(target.tokenizer, draft.tokenizer)
    findings += _model_findings(target.tokenizer, draft.tokenizer)
    findings += _pipeline_findings(target.tokenizer, draft.tokenizer)
    result = None
    if probe and target.fingerprint != draft.fingerprint:
        result = run_probe(target.source.tokenizer, draft.source.tokenizer)
    intersection = (intersect(target.tokenizer, draft.tokenizer) if target.fingerprint != draft.fingerprint
                    else None)
    return TokenizerDiff(vocab=vocab, findings=tuple(findings), probe=result, intersection=intersection)


# --- vocab ------------------------------------------------------------------------------------------------------


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


def _vocab_findings(vocab: VocabMatch, target: TokenizerProfile, draft: TokenizerProfile) -> Iterator[Finding]:
    yield Finding(
        "vocab.summary", Severity.INFO,
        f"{vocab.shared:,} ids mean the same string in both; target defines {target.assigned:,} ids "
        f"({target.regular_count:,} regular + {len(target.added):,} added), draft {draft.assigned:,} "
        f"({draft.regular_count:,} + {len(draft.added):,}); "
        + ("the maps are identical" if vocab.first_divergent_id is None
           else f"first divergent id {vocab.first_divergent_id}: target {_tok(target.token(vocab.first_divergent_id))}"
                f", draft {_tok(draft.token(vocab.first_divergent_id))}"),
        {"shared": vocab.shared, "target_ids": target.assigned, "draft_ids": draft.assigned,
         "conflicts": len(vocab.conflicts), "moved": len(vocab.moved), "renamed": len(vocab.renamed),
         "target_only": len(vocab.target_only), "draft_only": len(vocab.draft_only),
         "padding_tokens": len(vocab.padding),
         "first_divergent_id": vocab.first_divergent_id},
    )
    if vocab.conflicts:
        yield Finding(
            "vocab.conflict", Severity.ERROR,
            f"{len(vocab.conflicts):,} ids mean different strings: "
            + "; ".join(f"id {i} is {_tok(a)} in the target, {_tok(b)} in the draft"
                        for i, a, b in vocab.conflicts[:SHOW]) + _more(vocab.conflicts),
            {"count": len(vocab.conflicts), "examples": [list(c) for c in vocab.conflicts[:20]]},
        )
    if vocab.moved:
        yield Finding(
            "vocab.moved", Severity.ERROR,
            f"{len(vocab.moved):,} strings sit at different ids: "
            + "; ".join(f"{_tok(s)} is id {a} in the target, {b} in the draft" for s, a, b in vocab.moved[:SHOW])
            + _more(vocab.moved),
            {"count": len(vocab.moved), "examples": [list(m) for m in vocab.moved[:20]]},
        )
    if vocab.target_only:
        yield Finding(
            "vocab.target-extends", Severity.WARNING,
            f"the target has {len(vocab.target_only):,} tokens the draft lacks ({_id_span(vocab.target_only)}): "
            + ", ".join(_tok(s) for _, s in vocab.target_only[:SHOW]) + _more(vocab.target_only)
            + "; the draft never proposes them",
            {"count": len(vocab.target_only), "examples": [list(t) for t in vocab.target_only[:20]]},
        )
    if vocab.draft_only:
        yield Finding(
            "vocab.draft-extends", Severity.WARNING,
            f"the draft has {len(vocab.draft_only):,} tokens the target lacks ({_id_span(vocab.draft_only)}): "
            + ", ".join(_tok(s) for _, s in vocab.draft_only[:SHOW]) + _more(vocab.draft_only)
            + "; their draft probability is dropped",
            {"count": len(vocab.draft_only), "examples": [list(t) for t in vocab.draft_only[:20]]},
        )
    if vocab.padding:
        sides = sorted({side for _, side, _ in vocab.padding})
        yield Finding(
            "vocab.padding-tokens", Severity.INFO,
            f"{len(vocab.padding):,} placeholder tokens exist only in the {' and '.join(sides)}'s list "
            f"({', '.join(f'id {i} {_tok(t)}' for i, _, t in vocab.padding[:3])}{_more(vocab.padding, 3)}); they "
            "name padding rows and are treated as such",
            {"count": len(vocab.padding), "ids": [i for i, _, _ in vocab.padding[:50]]},
        )
    if vocab.renamed:
        yield Finding(
            "vocab.placeholder-renamed", Severity.WARNING,
            f"{len(vocab.renamed):,} reserved ids were given a real name on one side: "
            + "; ".join(f"id {i} is {_tok(a)} in the target, {_tok(b)} in the draft"
                        for i, a, b in vocab.renamed[:SHOW]) + _more(vocab.renamed)
            + "; the side that kept the placeholder never learned them, so they are treated like padding rows",
            {"count": len(vocab.renamed), "ids": [i for i, _, _ in vocab.renamed]},
        )
    if target.assigned and vocab.shared < target.assigned / 2 and not vocab.conflicts:
        yield Finding(
            "vocab.low-overlap", Severity.WARNING,
            f"the draft shares only {vocab.shared:,} of the target's {target.assigned:,} ids "
            f"({vocab.shared / target.assigned:.0%}); acceptance cannot be high",
            {"shared": vocab.shared, "target_ids": target.assigned},
        )


def _added_findings(target: TokenizerProfile, draft: TokenizerProfile) -> Iterator[Finding]:
    t_added = {t.id: t for t in target.added}
    d_added = {t.id: t for t in draft.added}
    flags = []
    kind = []
    for token_id in sorted(set(t_added) | set(d_added)):
        a, b = t_added.get(token_id), d_added.get(token_id)
        if a is not None and b is not None:
            if a.content == b.content and a.flags() != b.flags():
                changed = {k: (v, b.flags()[k]) for k, v in a.flags().items() if v != b.flags()[k]}
                flags.append((token_id, a.content, changed))
        else:
            present = a or b
            other = draft if a is not None else target
            if other.token(token_id) == present.content:
                kind.append((token_id, present.content, "target" if a is not None else "draft"))
    if flags:
        yield Finding(
            "added.flags", Severity.WARNING,
            f"{len(flags)} added tokens have different flags: "
            + "; ".join(f"id {i} {_tok(c)}: " + ", ".join(f"{k} {v[0]} in the target, {v[1]} in the draft"
                                                          for k, v in changed.items())
                        for i, c, changed in flags[:SHOW]) + _more(flags),
            {"tokens": [{"id": i, "content": c, "changed": {k: list(v) for k, v in ch.items()}}
                        for i, c, ch in flags[:50]]},
        )
    if kind:
        yield Finding(
            "added.kind", Severity.WARNING,
            f"{len(kind)} tokens are added tokens on one side and regular tokens on the other: "
            + "; ".join(f"id {i} {_tok(c)} is added in the {side} only" for i, c, side in kind[:SHOW]) + _more(kind)
            + "; text containing them may split differently",
            {"tokens": [{"id": i, "content": c, "added_in": side} for i, c, side in kind[:50]]},
        )


def _model_findings(target: TokenizerProfile, draft: TokenizerProfile) -> Iterator[Finding]:
    if target.model_type != draft.model_type:
        yield Finding("tokenizer.model-type", Severity.WARNING,
                      f"the target's tokenizer model is {target.model_type}, the draft's {draft.model_type}; "
                      "text will split differently and acceptance may drop",
                      {"target": target.model_type, "draft": draft.model_type})
        return
    if target.parts["model"] != draft.parts["model"]:
        changed = {k: (target.model_params.get(k), draft.model_params.get(k))
                   for k in sorted(set(target.model_params) | set(draft.model_params))
                   if target.model_params.get(k) != draft.model_params.get(k)}
        yield Finding("tokenizer.model-params", Severity.WARNING,
                      f"{target.model_type} parameters differ: "
                      + ", ".join(f"{k} {a!r} in the target, {b!r} in the draft" for k, (a, b) in changed.items()),
                      {"changed": {k: list(v) for k, v in changed.items()}})
    if target.merges is not None and draft.merges is not None and target.parts["merges"] != draft.parts["merges"]:
        t_merges = list(map(tuple, target.merges))
        d_merges = list(map(tuple, draft.merges))
        first = next(itertools.compress(itertools.count(), map(operator.ne, t_merges, d_merges)),
                     min(len(t_merges), len(d_merges)))
        t_set, d_set = set(t_merges), set(d_merges)
        both = len(t_set & d_set)
        only_t, only_d = len(t_set) - both, len(d_set) - both
        at = (f"first difference at rank {first}: target {_merge(t_merges, first)}, draft {_merge(d_merges, first)}")
        yield Finding("tokenizer.merges", Severity.WARNING,
                      f"BPE merges differ ({len(t_merges):,} in the target, {len(d_merges):,} in the draft; "
                      f"{only_t:,} only in the target, {only_d:,} only in the draft"
                      + ("; same merges in another order" if not only_t and not only_d else "")
                      + f"); {at}; text will split differently and acceptance may drop",
                      {"target_count": len(t_merges), "draft_count": len(d_merges), "only_target": only_t,
                       "only_draft": only_d, "first_difference_rank": first})
    if target.scores is not None and draft.scores is not None and target.parts["scores"] != draft.parts["scores"]:
        n = min(len(target.scores), len(draft.scores))
        changed = [i for i in range(n) if target.scores[i] != draft.scores[i]]
        count = len(changed) + abs(len(target.scores) - len(draft.scores))
        first = (f", first at id {changed[0]} {_tok(target.token(changed[0]))}: {target.scores[changed[0]]} in the "
                 f"target, {draft.scores[changed[0]]} in the draft" if changed else "")
        yield Finding("tokenizer.scores", Severity.WARNING,
                      f"Unigram scores differ for {count:,} pieces{first}; text will split differently and "
                      "acceptance may drop", {"changed": count})


def _pipeline_findings(target: TokenizerProfile, draft: TokenizerProfile) -> Iterator[Finding]:
    for name in PIPELINE:
        if target.parts[name] == draft.parts[name]:
            continue
        differences = list(structural_diff(target.pipeline[name], draft.pipeline[name], name))
        shown = "; ".join(f"{path}: {_short(a)} in the target, {_short(b)} in the draft"
                          for path, a, b in differences[:3])
        yield Finding(f"pipeline.{name.replace('_', '-')}", Severity.WARNING,
                      f"the {name.replace('_', '-')}s differ ({shown}); ids keep their meaning but text may split "
                      "or decode differently, so acceptance may drop",
                      {"differences": [{"path": p, "target": a, "draft": b} for p, a, b in differences[:20]]})


def structural_diff(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """Paths at which two JSON values differ, outermost first (``normalizer.normalizers[1].type``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.get("type") != b.get("type") and "type" in a and "type" in b:
            yield f"{path}.type", a.get("type"), b.get("type")
            return
        for key in sorted(set(a) | set(b)):
            if key not in a:
                yield f"{path}.{key}", "(absent)", b[key]
            elif key not in b:
                yield f"{path}.{key}", a[key], "(absent)"
            elif a[key] != b[key]:
                yield from structural_diff(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}", f"{len(a)} items", f"{len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                yield from structural_diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


# --- special tokens ---------------------------------------------------------------------------------------------


def _special_findings(target: ModelProfile, draft: ModelProfile) -> Iterator[Finding]:
    for role in ROLES:
        a, b = target.specials.role(role), draft.specials.role(role)
        if a != b:
            yield Finding(f"special.{role}", Severity.WARNING,
                          f"{role} token: target {_special(a)}, draft {_special(b)}",
                          {"target": _special_json(a), "draft": _special_json(b)})
    for side, profile in (("target", target), ("draft", draft)):
        for role in ROLES:
            token = profile.specials.role(role)
            if token is not None and token.content is not None and token.id is None:
                yield Finding("special.missing", Severity.WARNING,
                              f"the {side}'s {role} token {_tok(token.content)} is not in its own vocabulary",
                              {"side": side, "role": role, "content": token.content})
    for flag, code in (("add_bos", "special.add-bos"), ("add_eos", "special.add-eos")):
        a, b = getattr(target.specials, flag), getattr(draft.specials, flag)
        if a != b:
            ids = target.tokenizer.prefix_ids if flag == "add_bos" else target.tokenizer.suffix_ids
            other = draft.tokenizer.prefix_ids if flag == "add_bos" else draft.tokenizer.suffix_ids
            where = "before" if flag == "add_bos" else "after"
            yield Finding(code, Severity.WARNING,
                          f"the target's tokenizer adds {_ids(ids, target.tokenizer)} {where} a sequence, the "
                          f"draft's {_ids(other, draft.tokenizer)}; vocabcheck feeds both models the target's ids",
                          {"target": list(ids), "draft": list(other)})
    if target.generation_eos != draft.generation_eos:
        yield Finding("generation.eos", Severity.INFO,
                      f"generation eos ids: target {list(target.generation_eos)} "
                      f"({', '.join(_tok(target.tokenizer.token(i)) for i in target.generation_eos) or 'none'}), "
                      f"draft {list(draft.generation_eos)} "
                      f"({', '.join(_tok(draft.tokenizer.token(i)) for i in draft.generation_eos) or 'none'}); "
                      "generation stops on the target's",
                      {"target": list(target.generation_eos), "draft": list(draft.generation_eos)})
    if (target.chat_template or None) != (draft.chat_template or None):
        yield Finding("chat-template", Severity.INFO,
                      "chat templates differ: " + ("the draft has none" if not draft.chat_template else
                                                   "the target has none" if not target.chat_template else
                                                   f"{len(target.chat_template):,} vs {len(draft.chat_template):,} "
                                                   "characters")
                      + "; --chat formats prompts with the target's",
                      {"target": bool(target.chat_template), "draft": bool(draft.chat_template)})


# --- embedding rows ---------------------------------------------------------------------------------------------


def _row_findings(target: ModelProfile, draft: ModelProfile, vocab: VocabMatch) -> Iterator[Finding]:
    for side, profile in (("target", target), ("draft", draft)):
        emb = profile.embeddings
        if emb.source != "tensors":
            yield Finding("rows.unknown", Severity.INFO,
                          f"the {side} has no checkpoint; its rows are "
                          + (f"taken from config vocab_size {profile.config_vocab_size:,}" if emb.source == "config"
                             else "unknown"),
                          {"side": side, "source": emb.source})
            continue
        if profile.config_vocab_size is not None and profile.config_vocab_size != emb.rows:
            yield Finding("rows.config-mismatch", Severity.WARNING,
                          f"the {side}'s config.json says vocab_size {profile.config_vocab_size:,} but "
                          f"{emb.output_tensor or emb.input_tensor} has {emb.rows:,} rows; the tensors win",
                          {"side": side, "config_vocab_size": profile.config_vocab_size, "rows": emb.rows})
        if emb.input_rows is not None and emb.output_rows is not None and emb.input_rows != emb.output_rows:
            yield Finding("rows.embed-head-mismatch", Severity.WARNING,
                          f"the {side}'s {emb.input_tensor} has {emb.input_rows:,} rows but {emb.output_tensor} "
                          f"has {emb.output_rows:,}",
                          {"side": side, "input_rows": emb.input_rows, "output_rows": emb.output_rows})
        limit = min(r for r in (emb.input_rows, emb.output_rows) if r is not None)
        tokens = profile.tokenizer.tokens
        if len(tokens) > limit:
            beyond = [(i, tokens[i]) for i in range(limit, len(tokens)) if tokens[i] is not None]
            if beyond:
                yield Finding("rows.tokenizer-overflow", Severity.ERROR,
                              f"the {side}'s tokenizer emits {len(beyond):,} ids at or beyond its {limit:,} rows "
                              f"(first: id {beyond[0][0]} {_tok(beyond[0][1])}); the model cannot embed them and "
                              "is broken as shipped",
                              {"side": side, "rows": limit, "count": len(beyond), "first_id": beyond[0][0]})
    t_rows, d_rows = target.embeddings.rows, draft.embeddings.rows
    if t_rows is not None and d_rows is not None and t_rows != d_rows:
        used = max(len(target.tokenizer.tokens), len(draft.tokenizer.tokens))
        how = (f"the draft's probabilities are padded with {t_rows - d_rows:,} zero rows" if t_rows > d_rows else
               f"the draft's {d_rows - t_rows:,} extra rows are cut and its probabilities renormalised")
        yield Finding("rows.padded", Severity.INFO,
                      f"the target has {t_rows:,} rows and the draft {d_rows:,}; the tokenizers use {used:,} ids; "
                      + how,
                      {"target_rows": t_rows, "draft_rows": d_rows, "tokenizer_ids": used})
    t_cfg, d_cfg = target.config_vocab_size, draft.config_vocab_size
    if t_cfg is not None and d_cfg is not None:
        compatible = not vocab.conflicts and not vocab.moved
        if t_cfg != d_cfg and compatible:
            yield Finding("engine.vocab-size", Severity.INFO,
                          f"engines that compare config.vocab_size ({t_cfg:,} vs {d_cfg:,}) refuse this pair, "
                          "though every id both models can produce means the same; `vocabcheck align` writes a "
                          "draft they accept",
                          {"target_vocab_size": t_cfg, "draft_vocab_size": d_cfg, "engines_accept": False})
        elif t_cfg == d_cfg and not compatible:
            yield Finding("engine.vocab-size", Severity.INFO,
                          f"engines that compare config.vocab_size ({t_cfg:,} both) accept this pair and would run "
                          "it with ids that mean different things",
                          {"target_vocab_size": t_cfg, "draft_vocab_size": d_cfg, "engines_accept": True})


def _probe_finding(result: ProbeResult, vocab: VocabMatch) -> Finding:
    if not result.differing:
        return Finding("probe.encodings", Severity.INFO,
                       f"all {result.texts} probe texts encode to the same ids", {"texts": result.texts,
                                                                                    "differing": 0})
    return Finding(
        "probe.encodings", Severity.WARNING,
        f"{result.differing} of {result.texts} probe texts encode differently; first: {_short(result.first_text)} "
        f"→ target {_ids_with_tokens(result.target_ids, result.target_tokens)}, draft "
        f"{_ids_with_tokens(result.draft_ids, result.draft_tokens)}",
        {"texts": result.texts, "differing": result.differing, "first_text": result.first_text,
         "target_ids": list(result.target_ids), "draft_ids": list(result.draft_ids)},
    )


def _translation_finding(translation: Translation) -> Finding:
    roles = {r.role: {"target": r.target_id, "draft": r.draft_id} for r in translation.roles}
    if not translation.translatable:
        return Finding("translation.intersection", Severity.INFO,
                       f"no translated drafting: {translation.reason}",
                       {"translatable": False, "reason": translation.reason, "shared_tokens": 0, "roles": roles})
    mapped = [r for r in translation.roles if r.mapped]
    unreachable = translation.target_unreachable_count
    examples = unreachable_examples(translation)
    message = (f"{translation.shared_tokens:,} regular tokens stand for the same bytes in both "
               f"({translation.target_share:.1%} of the target's {translation.target_regular:,}, "
               f"{translation.draft_share:.1%} of the draft's {translation.draft_regular:,}); roles "
               + (", ".join(f"{r.role} {_tok(r.target_content)} ↔ {_tok(r.draft_content)}" for r in mapped)
                  or "none mapped")
               + f"; a translated draft never proposes {unreachable:,} target ids"
               + (f" (first: {', '.join(f'{_tok(t)} ({i})' for i, t in examples)})" if examples else ""))
    duplicates = [(side, d) for side, d in (("target", translation.intersection.target_duplicates),
                                             ("draft", translation.intersection.draft_duplicates)) if d]
    if duplicates:
        message += "; " + "; ".join(
            f"{sum(len(ids) - 1 for _, ids in found):,} {side} tokens repeat the bytes of another (first: "
            f"{describe_bytes(found[0][0])} is ids {', '.join(map(str, found[0][1]))})" for side, found in duplicates)
    return Finding("translation.intersection", Severity.INFO, message,
                   {"translatable": True, "shared_tokens": translation.shared_tokens,
                    "target_share": translation.target_share, "draft_share": translation.draft_share,
                    "roles": roles, "target_unreachable": unreachable})


# --- message helpers --------------------------------------------------------------------------------------------


def _tok(token: str | None) -> str:
    if token is None:
        return "(none)"
    text = repr(token)
    return text if len(text) <= 40 else text[:37] + "…'"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _more(items: Sequence[Any], shown: int = SHOW) -> str:
    return f" (and {len(items) - shown:,} more)" if len(items) > shown else ""


def _id_span(items: Sequence[tuple[int, str]]) -> str:
    first, last = items[0][0], items[-1][0]
    return f"id {first}" if first == last else f"ids {first}–{last}"


def _merge(merges: Sequence[tuple[str, ...]], rank: int) -> str:
    return _short(" ".join(merges[rank])) if rank < len(merges) else "(none)"


def _ids(ids: Sequence[int], tokenizer: TokenizerProfile) -> str:
    return "nothing" if not ids else ", ".join(f"{_tok(tokenizer.token(i))} ({i})" for i in ids)


def _ids_with_tokens(ids: Sequence[int], tokens: Sequence[str], limit: int = 8) -> str:
    shown = " ".join(f"{i}:{_tok(t)}" for i, t in list(zip(ids, tokens))[:limit])
    return f"[{shown}{' …' if len(ids) > limit else ''}]"


def _special(token) -> str:
    if token is None:
        return "none"
    return f"{_tok(token.content)} (id {token.id if token.id is not None else 'missing'})"


def _special_json(token) -> dict[str, Any] | None:
    return None if token is None else {"content": token.content, "id": token.id}
