"""The verdict matrix of a model family: every ordered pair of N models, for the cost of N profiles and one
tokenizer diff per ordered pair of distinct tokenizers.

Models are grouped by tokenizer fingerprint. Each model is opened and profiled once; the tokenizer-level part of a
pair's diff (vocab match, vocab/added/model/pipeline findings, the probe) is computed once per ordered pair of
tokenizers (:class:`vocabcheck.diff.TokenizerDiffCache`); what is left per pair of models (special tokens, rows, the
alignment) is cheap. Every cell is :func:`vocabcheck.verdict.judge` on the two profiles — exactly what
``vocabcheck compare TARGET DRAFT`` says for that pair; nothing here re-derives compatibility.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .diff import TokenizerDiffCache
from .errors import SourceNotFound, VocabcheckError
from .profile import ModelProfile, build_profile
from .sources import open_model
from .sources.local import CONFIG, SLOW_TOKENIZER_FILES, TOKENIZER_JSON
from .verdict import Comparison, Verdict, judge

MATRIX_SCHEMA = "vocabcheck.matrix/1"
MODEL_FILE_SUFFIXES = (".gguf",)  # single-file models a directory of models may hold next to model directories


@dataclass(frozen=True)
class ModelError:
    spec: str
    error: VocabcheckError


@dataclass(frozen=True)
class TokenizerGroup:
    id: str  # "A", "B", ... in order of first appearance
    fingerprint: str
    members: tuple[int, ...]  # indexes into Matrix.models


@dataclass(frozen=True)
class Matrix:
    models: tuple[ModelProfile, ...]  # ordered by tokenizer group, then as given
    names: tuple[str, ...]  # short labels, unique
    groups: tuple[TokenizerGroup, ...]
    cells: tuple[tuple[Comparison, ...], ...]  # cells[t][d]: models[t] as the target, models[d] as the draft
    errors: tuple[ModelError, ...]  # models that could not be read; they are not in the matrix
    probe: bool
    tokenizer_diffs: int
    seconds: float

    def group_of(self, index: int) -> TokenizerGroup:
        return next(g for g in self.groups if index in g.members)

    @property
    def exit_code(self) -> int:
        return 2 if self.errors else 0

    def verdicts(self) -> Counter[Verdict]:
        return Counter(c.verdict for row in self.cells for c in row)


@dataclass(frozen=True)
class GroupPair:
    """The cells whose target is in one tokenizer group and whose draft is in another (or the same)."""

    target: TokenizerGroup
    draft: TokenizerGroup
    verdicts: dict[Verdict, int]
    examples: dict[Verdict, Comparison]  # the first cell with each verdict


def expand_specs(specs: Sequence[str]) -> list[str]:
    """The models named on the command line: a directory that is not itself a model stands for the models in it
    (subdirectories holding a tokenizer or config.json, and GGUF files), in name order. Duplicates are dropped."""
    models: list[str] = []
    for spec in specs:
        path = Path(spec).expanduser()
        if path.is_dir() and not _has_tokenizer(path):
            children = sorted(child for child in path.iterdir()
                              if not child.name.startswith(".") and _looks_like_model(child))
            if not children:
                raise SourceNotFound("neither a model directory nor a directory of models: no tokenizer here, and "
                                     "no subdirectory with a tokenizer or config.json", path)
            models += [str(child) for child in children]
        else:
            models.append(spec)
    return list(dict.fromkeys(models))


def _has_tokenizer(directory: Path) -> bool:
    return any((directory / name).is_file() for name in (TOKENIZER_JSON, *SLOW_TOKENIZER_FILES))


def _looks_like_model(path: Path) -> bool:
    if path.is_dir():
        return _has_tokenizer(path) or (path / CONFIG).is_file()
    return path.is_file() and path.suffix.lower() in MODEL_FILE_SUFFIXES


def build_matrix(specs: Sequence[str], *, probe: bool = True) -> Matrix:
    """Profile each model once, group them by tokenizer fingerprint, and judge every ordered pair."""
    started = time.perf_counter()
    profiles: list[ModelProfile] = []
    errors: list[ModelError] = []
    for spec in dict.fromkeys(specs):
        try:
            profiles.append(build_profile(open_model(spec)))
        except VocabcheckError as exc:
            errors.append(ModelError(spec, exc))
    fingerprints = list(dict.fromkeys(p.fingerprint for p in profiles))
    models = tuple(sorted(profiles, key=lambda p: fingerprints.index(p.fingerprint)))  # stable: as given within
    groups = tuple(TokenizerGroup(id=_group_id(n), fingerprint=fp,
                                  members=tuple(i for i, p in enumerate(models) if p.fingerprint == fp))
                   for n, fp in enumerate(fingerprints))
    cache = TokenizerDiffCache()
    cells = tuple(tuple(judge(target, draft, probe=probe, cache=cache) for draft in models) for target in models)
    return Matrix(models=models, names=_names(models), groups=groups, cells=cells, errors=tuple(errors),
                  probe=probe, tokenizer_diffs=len(cache), seconds=time.perf_counter() - started)


def _group_id(n: int) -> str:
    """A, B, ..., Z, AA, AB, ..."""
    text = ""
    n += 1
    while n:
        n, rest = divmod(n - 1, 26)
        text = chr(ord("A") + rest) + text
    return text


def _names(models: Sequence[ModelProfile]) -> tuple[str, ...]:
    """The last path component of each model (a hub id stays whole); the full spec where that is ambiguous."""
    short = [p.spec if p.kind == "hub" else Path(p.spec.rstrip("/")).name or p.spec for p in models]
    counts = Counter(short)
    return tuple(name if counts[name] == 1 else p.spec for name, p in zip(short, models))


def group_pairs(matrix: Matrix) -> list[GroupPair]:
    pairs = []
    for g in matrix.groups:
        for h in matrix.groups:
            cells = [matrix.cells[t][d] for t in g.members for d in h.members]
            examples: dict[Verdict, Comparison] = {}
            for cell in cells:
                examples.setdefault(cell.verdict, cell)
            counts = Counter(c.verdict for c in cells)
            pairs.append(GroupPair(g, h, {v: counts[v] for v in Verdict if counts[v]}, examples))
    return pairs


def cost_line(matrix: Matrix) -> str:
    """What the matrix cost: "12 models, 3 tokenizers: 12 profiles, 9 tokenizer diffs, 144 verdicts"."""
    n, g, d = len(matrix.models), len(matrix.groups), matrix.tokenizer_diffs
    return (f"{_count(n, 'model')}, {_count(g, 'tokenizer')}: {_count(n + len(matrix.errors), 'profile')}, "
            f"{_count(d, 'tokenizer diff')}, {_count(n * n, 'verdict')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cell_symbol(comparison: Comparison) -> str:
    """``=`` identical; ``pad``/``cut``/``≈`` padded-compatible (how the draft's rows map onto the target's, ``≈``
    for equal rows); ``✗`` incompatible."""
    if comparison.verdict is Verdict.IDENTICAL:
        return "="
    if comparison.verdict is Verdict.PADDED_COMPATIBLE:
        return {"pad": "pad", "cut": "cut"}.get(comparison.alignment.mapping, "≈")
    return "✗"


LEGEND = ("= identical · pad / cut padded-compatible (the draft's rows are padded to / cut at the target's) · "
          "≈ padded-compatible with equal rows · ✗ incompatible; rows are targets, columns drafts")


def rows_text(profile: ModelProfile) -> str:
    emb = profile.embeddings
    if emb.source == "unknown":
        return "unknown"
    text = f"{emb.rows:,}"
    if emb.source == "config":
        return text + " (config)"
    if emb.input_rows is not None and emb.input_rows != emb.rows:
        text += f" (input {emb.input_rows:,})"
    return text + (", tied" if emb.tied else ", untied" if emb.tied is False else "")


# --- documents --------------------------------------------------------------------------------------------------


def matrix_document(matrix: Matrix) -> dict[str, Any]:
    """The ``--json`` document, schema ``vocabcheck.matrix/1`` (``schemas/matrix-1.json``)."""
    from .render.data import alignment_document, finding_document, profile_summary

    index = {id(p): i for i, p in enumerate(matrix.models)}
    verdicts = matrix.verdicts()
    return {
        "schema": MATRIX_SCHEMA,
        "vocabcheck_version": __version__,
        "exit_code": matrix.exit_code,
        "probe": matrix.probe,
        "summary": {"models": len(matrix.models), "groups": len(matrix.groups), "errors": len(matrix.errors),
                    "pairs": len(matrix.models) ** 2, "profiles": len(matrix.models) + len(matrix.errors),
                    "tokenizer_diffs": matrix.tokenizer_diffs,
                    "verdicts": {v.value: verdicts[v] for v in Verdict}, "seconds": round(matrix.seconds, 3)},
        "groups": [{"id": g.id, "fingerprint": g.fingerprint,
                    "model_type": matrix.models[g.members[0]].tokenizer.model_type,
                    "tokenizer_ids": matrix.models[g.members[0]].tokenizer.size,
                    "models": list(g.members)} for g in matrix.groups],
        "models": [{"index": i, "name": matrix.names[i], "group": matrix.group_of(i).id, **profile_summary(p)}
                   for i, p in enumerate(matrix.models)],
        "cells": [{
            "target": index[id(c.target)],
            "draft": index[id(c.draft)],
            "verdict": c.verdict.value,
            "reason": c.reason,
            "exit_code": 1 if c.failed() else 0,
            "first_divergent_id": c.first_divergent_id,
            # the id ranges are in `vocabcheck compare --json` for the pair; here they would repeat N² times
            "alignment": {k: v for k, v in alignment_document(c.alignment).items()
                          if k not in ("shared_ranges", "renamed_ids")},
            "findings": [{"code": f.code, "severity": f.severity.value} for f in c.findings],
            "top_findings": [finding_document(f) for f in c.top_findings(3)],
        } for row in matrix.cells for c in row],
        "group_pairs": [{"target": gp.target.id, "draft": gp.draft.id,
                         "verdicts": {v.value: n for v, n in gp.verdicts.items()},
                         "reasons": {v.value: c.reason for v, c in gp.examples.items()}}
                        for gp in group_pairs(matrix)],
        "errors": [{"spec": e.spec, "message": e.error.one_line(), "where": e.error.where,
                    "problem": e.error.problem, "type": type(e.error).__name__} for e in matrix.errors],
    }


def matrix_markdown(matrix: Matrix) -> str:
    from .render.markdown import escape

    n = len(matrix.models)
    lines = ["## vocabcheck matrix", "",
             cost_line(matrix) + ".", "",
             "| # | tokenizer | model | rows |", "|---|---|---|---|"]
    for i, p in enumerate(matrix.models):
        g = matrix.group_of(i)
        lines.append(f"| {i + 1} | {g.id} ({p.tokenizer.model_type}, {p.tokenizer.size:,} ids, "
                     f"`{g.fingerprint[:12]}`) | `{escape(matrix.names[i])}` | {escape(rows_text(p))} |")
    lines += ["", "| target ↓ draft → | " + " | ".join(str(j + 1) for j in range(n)) + " |",
              "|---|" + "---|" * n]
    for i, row in enumerate(matrix.cells):
        lines.append(f"| **{i + 1}** {matrix.group_of(i).id} | "
                     + " | ".join(escape(cell_symbol(c)) for c in row) + " |")
    lines += ["", escape(LEGEND), "", "| target tokenizer | draft tokenizer | verdicts | reason (first pair) |",
              "|---|---|---|---|"]
    for gp in group_pairs(matrix):
        for verdict, count in gp.verdicts.items():
            lines.append(f"| {gp.target.id} | {gp.draft.id} | {verdict.value} ×{count} | "
                         f"{escape(gp.examples[verdict].reason)} |")
    if matrix.errors:
        lines += ["", "Could not be read:", ""] + [f"- {escape(e.error.one_line())}" for e in matrix.errors]
    return "\n".join(lines) + "\n"


__all__ = ["LEGEND", "MATRIX_SCHEMA", "GroupPair", "Matrix", "ModelError", "TokenizerGroup", "build_matrix",
           "cell_symbol", "cost_line", "expand_specs", "group_pairs", "matrix_document", "matrix_markdown",
           "rows_text"]
