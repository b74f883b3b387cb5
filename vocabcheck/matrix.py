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

from .diff import TokenizerDiffCache
from .errors import ExitCode, SourceNotFound, VocabcheckError
from .profile import ModelProfile, profile_of
from .sources.local import CONFIG, SLOW_TOKENIZER_FILES, TOKENIZER_JSON
from .verdict import Comparison, Verdict, judge

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
        return ExitCode.BAD_INPUT if self.errors else ExitCode.OK

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
    """Profile each model once, group them by tokenizer fingerprint, and judge every ordered pair.

    ``specs`` are what ``vocabcheck matrix`` takes: models, or directories of models (:func:`expand_specs`)."""
    started = time.perf_counter()
    profiles: list[ModelProfile] = []
    errors: list[ModelError] = []
    for spec in expand_specs(specs):
        try:
            profiles.append(profile_of(spec))
        except VocabcheckError as exc:
            errors.append(ModelError(spec, exc))
    fingerprints = list(dict.fromkeys(p.fingerprint for p in profiles))
    models = tuple(sorted(profiles, key=lambda p: fingerprints.index(p.fingerprint)))  # stable: as given within
    groups = tuple(TokenizerGroup(id=_group_id(n), fingerprint=fp,
                                  members=tuple(i for i, p in enumerate(models) if p.fingerprint == fp))
                   for n, fp in enumerate(fingerprints))
    cache = TokenizerDiffCache()
    cells = tuple(tuple(_judged(target, draft, probe=probe, cache=cache) for draft in models) for target in models)
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


__all__ = ["GroupPair", "Matrix", "ModelError", "TokenizerGroup", "build_matrix", "expand_specs", "group_pairs"]


def _judged(target: ModelProfile, draft: ModelProfile, *, probe: bool, cache: TokenizerDiffCache) -> Comparison:
    """One cell: the comparison without its translation's id tables (the matrix shows verdicts and alignments)."""
    comparison = judge(target, draft, probe=probe, cache=cache)
    if comparison.translation is not None:
        comparison.translation.drop_tables()
    return comparison
