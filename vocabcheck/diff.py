"""Findings between two profiles: each with a stable code, a severity and a message that names ids and strings.

The codes are part of the JSON schema and of `gate` manifests (``allow = [...]``); they never change meaning.
See :data:`vocabcheck.findings.CODES` for the catalogue.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import InputError
from .findings import (
    SHOW, Finding, Severity, id_span, ids_text, ids_with_tokens, merge_text, more, short, special_json, special_text,
    token_text,
)
from .probe import ProbeResult, corpus_encoding, run_probe
from .profile import ROLES, ModelProfile
from .tokenizer import PIPELINE, TokenizerProfile
from .translation import (DecoderTooCostly, Intersection, Translation, describe_bytes, intersect, translate,
                          unreachable_examples)
from .vocab import VocabMatch, match_vocab


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
        result = run_probe(corpus_encoding(target.source), corpus_encoding(draft.source))
    try:
        intersection = (intersect(target.tokenizer, draft.tokenizer) if target.fingerprint != draft.fingerprint
                        else None)
    except DecoderTooCostly as exc:  # the one line names the file whose decoder it is
        source = (target if exc.side == "target" else draft).source
        raise InputError(exc.problem, source.tokenizer_where) from exc
    return TokenizerDiff(vocab=vocab, findings=tuple(findings), probe=result, intersection=intersection)


# --- vocab ------------------------------------------------------------------------------------------------------


def _vocab_findings(vocab: VocabMatch, target: TokenizerProfile, draft: TokenizerProfile) -> Iterator[Finding]:
    yield Finding(
        "vocab.summary", Severity.INFO,
        f"{vocab.shared:,} ids mean the same string in both; target defines {target.assigned:,} ids "
        f"({target.regular_count:,} regular + {len(target.added):,} added), draft {draft.assigned:,} "
        f"({draft.regular_count:,} + {len(draft.added):,}); "
        + ("the maps are identical" if vocab.first_divergent_id is None
           else f"first divergent id {vocab.first_divergent_id}: target {token_text(target.token(vocab.first_divergent_id))}"
                f", draft {token_text(draft.token(vocab.first_divergent_id))}"),
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
            + "; ".join(f"id {i} is {token_text(a)} in the target, {token_text(b)} in the draft"
                        for i, a, b in vocab.conflicts[:SHOW]) + more(vocab.conflicts),
            {"count": len(vocab.conflicts), "examples": [list(c) for c in vocab.conflicts[:20]]},
        )
    if vocab.moved:
        yield Finding(
            "vocab.moved", Severity.ERROR,
            f"{len(vocab.moved):,} strings sit at different ids: "
            + "; ".join(f"{token_text(s)} is id {a} in the target, {b} in the draft" for s, a, b in vocab.moved[:SHOW])
            + more(vocab.moved),
            {"count": len(vocab.moved), "examples": [list(m) for m in vocab.moved[:20]]},
        )
    if vocab.target_only:
        yield Finding(
            "vocab.target-extends", Severity.WARNING,
            f"the target has {len(vocab.target_only):,} tokens the draft lacks ({id_span(vocab.target_only)}): "
            + ", ".join(token_text(s) for _, s in vocab.target_only[:SHOW]) + more(vocab.target_only)
            + "; the draft never proposes them",
            {"count": len(vocab.target_only), "examples": [list(t) for t in vocab.target_only[:20]]},
        )
    if vocab.draft_only:
        yield Finding(
            "vocab.draft-extends", Severity.WARNING,
            f"the draft has {len(vocab.draft_only):,} tokens the target lacks ({id_span(vocab.draft_only)}): "
            + ", ".join(token_text(s) for _, s in vocab.draft_only[:SHOW]) + more(vocab.draft_only)
            + "; their draft probability is dropped",
            {"count": len(vocab.draft_only), "examples": [list(t) for t in vocab.draft_only[:20]]},
        )
    if vocab.padding:
        sides = sorted({side for _, side, _ in vocab.padding})
        yield Finding(
            "vocab.padding-tokens", Severity.INFO,
            f"{len(vocab.padding):,} placeholder tokens exist only in the {' and '.join(sides)}'s list "
            f"({', '.join(f'id {i} {token_text(t)}' for i, _, t in vocab.padding[:3])}{more(vocab.padding, 3)}); they "
            "name padding rows and are treated as such",
            {"count": len(vocab.padding), "ids": [i for i, _, _ in vocab.padding[:50]]},
        )
    if vocab.renamed:
        yield Finding(
            "vocab.placeholder-renamed", Severity.WARNING,
            f"{len(vocab.renamed):,} reserved ids were given a real name on one side: "
            + "; ".join(f"id {i} is {token_text(a)} in the target, {token_text(b)} in the draft"
                        for i, a, b in vocab.renamed[:SHOW]) + more(vocab.renamed)
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
            + "; ".join(f"id {i} {token_text(c)}: " + ", ".join(f"{k} {v[0]} in the target, {v[1]} in the draft"
                                                          for k, v in changed.items())
                        for i, c, changed in flags[:SHOW]) + more(flags),
            {"tokens": [{"id": i, "content": c, "changed": {k: list(v) for k, v in ch.items()}}
                        for i, c, ch in flags[:50]]},
        )
    if kind:
        yield Finding(
            "added.kind", Severity.WARNING,
            f"{len(kind)} tokens are added tokens on one side and regular tokens on the other: "
            + "; ".join(f"id {i} {token_text(c)} is added in the {side} only" for i, c, side in kind[:SHOW]) + more(kind)
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
        at = (f"first difference at rank {first}: target {merge_text(t_merges, first)}, draft {merge_text(d_merges, first)}")
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
        first = (f", first at id {changed[0]} {token_text(target.token(changed[0]))}: {target.scores[changed[0]]} in the "
                 f"target, {draft.scores[changed[0]]} in the draft" if changed else "")
        yield Finding("tokenizer.scores", Severity.WARNING,
                      f"Unigram scores differ for {count:,} pieces{first}; text will split differently and "
                      "acceptance may drop", {"changed": count})


def _pipeline_findings(target: TokenizerProfile, draft: TokenizerProfile) -> Iterator[Finding]:
    for name in PIPELINE:
        if target.parts[name] == draft.parts[name]:
            continue
        differences = list(structural_diff(target.pipeline[name], draft.pipeline[name], name))
        shown = "; ".join(f"{path}: {short(a)} in the target, {short(b)} in the draft"
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
                          f"{role} token: target {special_text(a)}, draft {special_text(b)}",
                          {"target": special_json(a), "draft": special_json(b)})
    for side, profile in (("target", target), ("draft", draft)):
        for role in ROLES:
            token = profile.specials.role(role)
            if token is not None and token.content is not None and token.id is None:
                yield Finding("special.missing", Severity.WARNING,
                              f"the {side}'s {role} token {token_text(token.content)} is not in its own vocabulary",
                              {"side": side, "role": role, "content": token.content})
    for flag, code in (("add_bos", "special.add-bos"), ("add_eos", "special.add-eos")):
        a, b = getattr(target.specials, flag), getattr(draft.specials, flag)
        if a != b:
            ids = target.tokenizer.prefix_ids if flag == "add_bos" else target.tokenizer.suffix_ids
            other = draft.tokenizer.prefix_ids if flag == "add_bos" else draft.tokenizer.suffix_ids
            where = "before" if flag == "add_bos" else "after"
            yield Finding(code, Severity.WARNING,
                          f"the target's tokenizer adds {ids_text(ids, target.tokenizer)} {where} a sequence, the "
                          f"draft's {ids_text(other, draft.tokenizer)}; vocabcheck feeds both models the target's ids",
                          {"target": list(ids), "draft": list(other)})
    if target.generation_eos != draft.generation_eos:
        yield Finding("generation.eos", Severity.INFO,
                      f"generation eos ids: target {list(target.generation_eos)} "
                      f"({', '.join(token_text(target.tokenizer.token(i)) for i in target.generation_eos) or 'none'}), "
                      f"draft {list(draft.generation_eos)} "
                      f"({', '.join(token_text(draft.tokenizer.token(i)) for i in draft.generation_eos) or 'none'}); "
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
                              f"(first: id {beyond[0][0]} {token_text(beyond[0][1])}); the model cannot embed them and "
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
        f"{result.differing} of {result.texts} probe texts encode differently; first: {short(result.first_text)} "
        f"→ target {ids_with_tokens(result.target_ids, result.target_tokens)}, draft "
        f"{ids_with_tokens(result.draft_ids, result.draft_tokens)}",
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
               + (", ".join(f"{r.role} {token_text(r.target_content)} ↔ {token_text(r.draft_content)}" for r in mapped)
                  or "none mapped")
               + f"; a translated draft never proposes {unreachable:,} target ids"
               + (f" (first: {', '.join(f'{token_text(t)} ({i})' for i, t in examples)})" if examples else ""))
    duplicates = [(side, d) for side, d in (("target", translation.intersection.target_duplicates),
                                             ("draft", translation.intersection.draft_duplicates)) if d]
    if duplicates:
        message += "; " + "; ".join(
            f"{sum(len(ids) - 1 for _, ids in found):,} {side} tokens repeat the bytes of another (first: "
            f"{describe_bytes(found[0][0])} is ids {', '.join(map(str, found[0][1][:SHOW]))}{more(found[0][1])})"
            for side, found in duplicates)
    return Finding("translation.intersection", Severity.INFO, message,
                   {"translatable": True, "shared_tokens": translation.shared_tokens,
                    "target_share": translation.target_share, "draft_share": translation.draft_share,
                    "roles": roles, "target_unreachable": unreachable})
