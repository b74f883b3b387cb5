"""Profiles and comparisons as plain data: the versioned JSON documents of ``--json``, and every schema id.

Schemas live in ``vocabcheck/schemas/`` (JSON Schema draft 2020-12). A schema id changes its number when a field
changes meaning or disappears; new fields may appear within a version. The ids of every command's document are
defined here, and only here; the documents of ``inspect``, ``compare`` and ``run`` (and the pieces the others reuse)
are built here, those of ``gate``, ``matrix``, ``align`` and ``bench`` in their ``*_report`` modules.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from .. import __version__
from ..profile import ModelProfile, SpecialToken
from ..verdict import Alignment, Comparison

INSPECT_SCHEMA = "vocabcheck.inspect/1"
COMPARE_SCHEMA = "vocabcheck.compare/1"
RUN_SCHEMA = "vocabcheck.run/1"
BENCH_SCHEMA = "vocabcheck.bench/1"
GATE_SCHEMA = "vocabcheck.gate/1"
MATRIX_SCHEMA = "vocabcheck.matrix/1"
ALIGN_SCHEMA = "vocabcheck.align/1"
PREDICT_SCHEMA = "vocabcheck.predict/1"


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of a document, by file name (``compare-1``, ``inspect-1``, ``run-1``...)."""
    return json.loads((resources.files("vocabcheck") / "schemas" / f"{name}.json").read_text(encoding="utf-8"))


# characters a terminal acts on that json.dumps(ensure_ascii=False) leaves raw (it escapes only C0): C1 controls
# (U+009B is a CSI) and the bidi overrides and isolates; written as JSON escapes, the document reads back the same
_UNSAFE_IN_JSON = {c: f"\\u{c:04x}" for c in (*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                                0x2028, 0x2029)}


def dumps(document: dict[str, Any]) -> str:
    """A JSON document as text, with every character a terminal would act on escaped (in strings, the only place
    they can be)."""
    return json.dumps(document, indent=2, ensure_ascii=False).translate(_UNSAFE_IN_JSON) + "\n"


def profile_summary(profile: ModelProfile) -> dict[str, Any]:
    tok = profile.tokenizer
    emb = profile.embeddings
    specials = profile.specials
    return {
        "spec": profile.spec,
        "kind": profile.kind,
        "location": profile.location,
        "revision": profile.revision,
        "provenance": dict(profile.provenance),
        "architecture": profile.architecture,
        "tokenizer": {
            "model_type": tok.model_type,
            "fingerprint": tok.fingerprint,
            "size": tok.size,
            "assigned_ids": tok.assigned,
            "regular_tokens": tok.regular_count,
            "added_tokens": len(tok.added),
            "special_added_tokens": sum(t.special for t in tok.added),
            "merges": len(tok.merges) if tok.merges is not None else None,
            "prefix_ids": list(tok.prefix_ids),
            "suffix_ids": list(tok.suffix_ids),
        },
        "special_tokens": {
            **{role: _special(specials.role(role)) for role in ("bos", "eos", "pad", "unk")},
            "add_bos": specials.add_bos,
            "add_eos": specials.add_eos,
            "config_add_bos": specials.config_add_bos,
            "config_add_eos": specials.config_add_eos,
        },
        "generation_eos": list(profile.generation_eos),
        "config_vocab_size": profile.config_vocab_size,
        "embeddings": {
            "input_rows": emb.input_rows,
            "output_rows": emb.output_rows,
            "input_tensor": emb.input_tensor,
            "output_tensor": emb.output_tensor,
            "tied": emb.tied,
            "hidden_size": emb.hidden_size,
            "source": emb.source,
        },
        "chat_template": profile.chat_template is not None,
    }


def inspect_document(profile: ModelProfile) -> dict[str, Any]:
    tok = profile.tokenizer
    return {
        "schema": INSPECT_SCHEMA,
        "vocabcheck_version": __version__,
        **profile_summary(profile),
        "added_tokens": [{"id": t.id, "content": t.content, **t.flags()} for t in tok.added],
        "model_params": dict(tok.model_params),
        "pipeline": dict(tok.pipeline),
    }


def alignment_document(alignment: Alignment) -> dict[str, Any]:
    return {
        "target_rows": alignment.target_rows,
        "draft_rows": alignment.draft_rows,
        "target_input_rows": alignment.target_input_rows,
        "draft_input_rows": alignment.draft_input_rows,
        "rows_source": alignment.rows_source,
        "mapping": alignment.mapping,
        "pad_rows": alignment.pad_rows,
        "cut_rows": alignment.cut_rows,
        "shared_ids": alignment.shared_ids,
        "shared_ranges": [list(r) for r in alignment.shared_ranges],
        "draft_substitute_id": alignment.draft_substitute_id,
        "renamed_ids": list(alignment.renamed_ids),
    }


def compare_document(comparison: Comparison, *, strict: bool = False) -> dict[str, Any]:
    probe = comparison.diff.probe
    return {
        "schema": COMPARE_SCHEMA,
        "vocabcheck_version": __version__,
        "verdict": comparison.verdict.value,
        "reason": comparison.reason,
        "exit_code": 1 if comparison.failed(strict) else 0,
        "strict": strict,
        "target": profile_summary(comparison.target),
        "draft": profile_summary(comparison.draft),
        "findings": [finding_document(f) for f in comparison.findings],
        "alignment": alignment_document(comparison.alignment),
        "first_divergent_id": comparison.first_divergent_id,
        "probe": None if probe is None else {
            "texts": probe.texts, "differing": probe.differing, "first_text": probe.first_text,
            "target_ids": list(probe.target_ids), "draft_ids": list(probe.draft_ids),
        },
        "translation": translation_document(comparison.diff.translation),
    }


def translation_document(translation) -> dict[str, Any] | None:
    """The ``translation`` block of a compare document: ``None`` when the tokenizers are equivalent."""
    if translation is None:
        return None
    from ..translation import unreachable_examples

    inter = translation.intersection
    return {
        "translatable": translation.translatable,
        "reason": translation.reason,
        "target_scheme": inter.target.kind,
        "draft_scheme": inter.draft.kind,
        "shared_tokens": translation.shared_tokens,
        "target_regular_tokens": translation.target_regular,
        "draft_regular_tokens": translation.draft_regular,
        "target_share": translation.target_share,
        "draft_share": translation.draft_share,
        "roles": {r.role: {"target": {"id": r.target_id, "content": r.target_content},
                           "draft": {"id": r.draft_id, "content": r.draft_content}, "mapped": r.mapped}
                  for r in translation.roles},
        "added_pairs": [list(pair) for pair in inter.added_pairs],
        "mapped_ids": len(translation.pairs[0]),
        "target_unreachable": {
            "count": translation.target_unreachable_count,
            "first": [{"id": i, "token": token} for i, token in unreachable_examples(translation, 20)],
        },
        "duplicates": {side: {"count": sum(len(ids) - 1 for _, ids in found),
                              "first": [{"hex": value.hex(), "text": _text(value), "ids": list(ids[:20]),
                                         "id_count": len(ids)} for value, ids in found[:20]]}
                       for side, found in (("target", inter.target_duplicates), ("draft", inter.draft_duplicates))},
    }


def _text(value: bytes) -> str | None:
    """Bytes as text when they are UTF-8 (a byte-level token may be part of a character)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def finding_document(finding) -> dict[str, Any]:
    return {"code": finding.code, "severity": finding.severity.value, "message": finding.message,
            "details": _plain(finding.details)}


def error_document(error) -> dict[str, Any]:
    """A :class:`vocabcheck.errors.VocabcheckError` that a report carries instead of a result."""
    return {"message": error.one_line(), "where": error.where, "problem": error.problem,
            "type": type(error).__name__}


def _special(token: SpecialToken | None) -> dict[str, Any] | None:
    return None if token is None else {"content": token.content, "id": token.id}


def _plain(value: Any) -> Any:
    """Make details JSON-safe: tuples to lists, everything else unchanged."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def metrics_document(m) -> dict[str, Any]:
    return {
        "method": m.method,
        "k": m.k,
        "batch_size": m.batch_size,
        "generated_tokens": m.generated,
        "drafted_tokens": m.drafted,
        "accepted_tokens": m.accepted,
        "verifications": m.steps,
        "proposed_tokens": m.proposed,
        "mean_proposal_length": m.proposal_length,
        "steps": m.verify_passes,
        "steps_without_speculation": m.plain_steps,
        "kept_state": m.kept_state,
        "acceptance_rate": m.acceptance_rate,
        "mean_accepted_length": m.mean_accepted_length,
        "acceptance_by_position": m.acceptance_by_position,
        "ttft_ms": m.ttft_s * 1000.0,
        "tpot_ms": m.tpot_ms,
        "tokens_per_s": m.tokens_per_s,
        "time_s": {"total": m.total_s, "prefill": m.prefill_s, "draft": m.draft_s, "target": m.target_s,
                   "other": m.other_s},
        "first_tokens": m.first_tokens,
        "rows": [{"generated_tokens": r.generated, "first_tokens": r.first_tokens, "verifications": r.steps,
                  "drafted_tokens": r.drafted, "accepted_tokens": r.accepted, "proposed_tokens": r.proposed,
                  "mean_proposal_length": r.proposal_length, "verifications_without_proposals": r.unspeculated,
                  "tpot_ms": None if r.tpot_s != r.tpot_s else r.tpot_s * 1000.0} for r in m.rows],
        "translation": {"outside_shared_tokens": m.outside_shared, "outside_shared_share": m.outside_shared_share,
                        "reencodings": m.reencodings, "reencodings_per_100_tokens": m.reencodings_per_100}
        if m.translated else None,
    }


def run_document(session, result, *, sampling, seed: int, options=None) -> dict[str, Any]:
    comparison = session.comparison
    return {
        "schema": RUN_SCHEMA,
        "vocabcheck_version": __version__,
        "method": result.metrics.method,
        "target": session.target_profile.spec,
        "draft": session.draft_profile.spec if session.draft_profile is not None else None,
        "verdict": comparison.verdict.value if comparison is not None else None,
        "alignment": alignment_document(comparison.alignment) if comparison is not None else None,
        "engine": {"name": getattr(session, "engine", "vocabcheck"),
                   "version": getattr(session, "engine_version", __version__),
                   **({"speculative_config": session.config_for(options)} if options is not None
                      and hasattr(session, "config_for") else {})},
        "device": str(session.device),
        "dtype": str(session.dtype).removeprefix("torch."),
        "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                     "seed": seed},
        "interrupted": result.interrupted,
        "sequences": [
            {"prompt": s.prompt.text, "prompt_ids": list(s.prompt_ids), "text": s.text, "token_ids": list(s.token_ids),
             "finish_reason": s.finish_reason}
            for s in result.sequences
        ],
        "metrics": metrics_document(result.metrics),
    }
