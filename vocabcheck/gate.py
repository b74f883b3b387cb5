"""The CI gate: a TOML manifest of target/draft pairs, each with the verdict it must get.

::

    [[pair]]
    name   = "7B with the 0.5B draft"    # optional; defaults to "TARGET ← DRAFT"
    target = "models/qwen2.5-7b"         # anything compare accepts; relative paths are relative to the manifest
    draft  = "models/qwen2.5-0.5b"
    expect = "padded-compatible"         # exactly this verdict: "identical", "padded-compatible", "incompatible"
    # min  = "padded-compatible"         # or at least this good (identical > padded-compatible > incompatible)
    strict = true                        # optional: warnings fail the pair...
    allow  = ["special.eos"]             # ...except these finding codes (vocabcheck.findings.CODES)

A pair with neither ``expect`` nor ``min`` must be at least padded-compatible (what ``compare`` exits 0 for).
Each distinct model is opened and profiled once, however many pairs name it, and the tokenizer-level diff is computed
once per pair of tokenizers; every verdict is the one ``vocabcheck compare`` gives for that pair.

A model that cannot be read makes its pairs *errors*; the other pairs are still evaluated and reported. Exit code: 0
every pair as expected, 1 some not, 2 a pair could not be evaluated (a manifest that cannot be read is an error
before any pair runs).
"""

from __future__ import annotations

import dataclasses
import difflib
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from .diff import TokenizerDiffCache
from .errors import ExitCode, InputError, VocabcheckError
from .findings import CODES, Finding, Severity
from .profile import ModelProfile, profile_of
from .sources import HUB_ID
from .verdict import Comparison, Verdict, judge

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
PAIR_KEYS = ("name", "target", "draft", "expect", "min", "strict", "allow")
VERDICTS = tuple(v.value for v in Verdict)


# --- the manifest -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """``expect = V`` (exactly V) or ``min = V`` (V or better)."""

    verdict: Verdict
    at_least: bool

    def met_by(self, verdict: Verdict) -> bool:
        return verdict.rank >= self.verdict.rank if self.at_least else verdict is self.verdict

    def describe(self) -> str:
        if self.at_least and self.verdict is Verdict.PADDED_COMPATIBLE:
            return f"≥ {self.verdict.value}"
        if self.at_least and self.verdict is Verdict.INCOMPATIBLE:
            return "any verdict"
        return self.verdict.value  # exactly, or at least identical (which is identical)


DEFAULT_EXPECTATION = Expectation(Verdict.PADDED_COMPATIBLE, at_least=True)


@dataclass(frozen=True)
class PairSpec:
    """One ``[[pair]]``: the models as written in the manifest and as resolved against its directory."""

    number: int  # 1-based position in the manifest
    name: str
    target: str
    draft: str
    target_spec: str
    draft_spec: str
    expect: Expectation
    strict: bool
    allow: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    path: Path
    pairs: tuple[PairSpec, ...]


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a gate manifest; any problem is an :class:`InputError` naming the manifest."""
    from .sources.base import read_capped

    path = Path(path)
    if path.is_dir():
        raise InputError("is a directory; expected a TOML gate manifest", path)
    data = read_capped(path, MAX_MANIFEST_BYTES, "gate manifest")
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError("the gate manifest is not UTF-8 text", path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path) from exc
    except RecursionError as exc:  # tomllib parses nested arrays and inline tables recursively
        raise InputError("arrays or inline tables nested too deeply for a gate manifest (tomllib gives up at a few "
                         "hundred levels)", path) from exc
    unknown = sorted(set(document) - {"pair"})
    if unknown:
        raise InputError(f"unknown top-level key {unknown[0]!r}; a gate manifest holds [[pair]] tables", path)
    raw_pairs = document.get("pair")
    if isinstance(raw_pairs, dict):
        raise InputError("[pair] is one table; write each pair as [[pair]] (an array of tables)", path)
    if not isinstance(raw_pairs, list) or not raw_pairs:
        raise InputError("no [[pair]] tables: a gate manifest lists pairs as [[pair]] with target, draft and "
                         "expect", path)
    pairs = tuple(_pair(entry, number, path) for number, entry in enumerate(raw_pairs, start=1))
    seen: dict[str, int] = {}
    for pair in pairs:
        if pair.name in seen:
            raise InputError(f"pair {pair.number}: the name {pair.name!r} is already used by pair {seen[pair.name]}; "
                             "give each pair a distinct name", path)
        seen[pair.name] = pair.number
    return Manifest(path=path, pairs=pairs)


def _pair(entry: Any, number: int, path: Path) -> PairSpec:
    where = f"pair {number}"
    if not isinstance(entry, dict):
        raise InputError(f"{where}: must be a table ([[pair]]), found {type(entry).__name__}", path)
    if isinstance(entry.get("name"), str):
        where = f"pair {number} ({entry['name']!r})"
    unknown = sorted(set(entry) - set(PAIR_KEYS))
    if unknown:
        hint = _did_you_mean(unknown[0], PAIR_KEYS)
        raise InputError(f"{where}: unknown key {unknown[0]!r}{hint}; a pair has {', '.join(PAIR_KEYS)}", path)

    def text(key: str) -> str:
        if key not in entry:
            raise InputError(f'{where}: missing "{key}"', path)
        value = entry[key]
        if not isinstance(value, str) or not value.strip():
            raise InputError(f'{where}: "{key}" must be a non-empty string, found {value!r}'[:300], path)
        return value

    target, draft = text("target"), text("draft")
    name = text("name") if "name" in entry else f"{target} ← {draft}"
    if "expect" in entry and "min" in entry:
        raise InputError(f'{where}: give "expect" (exactly) or "min" (at least), not both', path)
    expect = DEFAULT_EXPECTATION
    for key, at_least in (("expect", False), ("min", True)):
        if key in entry:
            value = entry[key]
            if value not in VERDICTS:
                raise InputError(f'{where}: "{key}" must be one of {", ".join(VERDICTS)}; found {value!r}'[:300],
                                 path)
            expect = Expectation(Verdict(value), at_least)
    strict = entry.get("strict", False)
    if not isinstance(strict, bool):
        raise InputError(f'{where}: "strict" must be true or false, found {strict!r}'[:300], path)
    allow = entry.get("allow", [])
    if not isinstance(allow, list) or not all(isinstance(code, str) for code in allow):
        raise InputError(f'{where}: "allow" must be a list of finding codes (strings)', path)
    for code in allow:
        if code not in CODES:
            raise InputError(f'{where}: unknown finding code {code!r} in "allow"{_did_you_mean(code, CODES)}; '
                             "codes are listed in docs/findings.md", path)
    if allow and not strict:
        raise InputError(f'{where}: "allow" only matters with strict = true (without it warnings never fail a '
                         "pair)", path)
    base = path.parent
    return PairSpec(number=number, name=name, target=target, draft=draft, target_spec=resolve_spec(target, base),
                    draft_spec=resolve_spec(draft, base), expect=expect, strict=strict,
                    allow=tuple(dict.fromkeys(allow)))


def _did_you_mean(word: str, choices: Sequence[str] | Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def resolve_spec(spec: str, base: Path) -> str:
    """A model as written in a manifest, made usable from the current directory.

    Absolute and ``~`` paths stay; a relative path is relative to the manifest's directory. A hub id
    (``org/name[@revision]``) stays a hub id unless such a path exists next to the manifest, or its first part does
    (then it is a path with a typo, and the error should name the path).
    """
    path = Path(spec).expanduser()
    if path.is_absolute():
        return str(path)
    local = base / path
    if local.exists():
        return str(local)
    if HUB_ID.match(spec) and not spec.startswith((".", "~")) and not (base / path.parts[0]).exists():
        return spec
    return str(local)


# --- running it -------------------------------------------------------------------------------------------------


class Outcome(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


@dataclass(frozen=True)
class PairResult:
    pair: PairSpec
    outcome: Outcome
    comparison: Comparison | None  # None when a model could not be read
    failures: tuple[str, ...]  # one sentence per unmet expectation
    error: VocabcheckError | None
    seconds: float  # judging the pair, plus profiling the models it was the first to name

    def top_finding(self) -> Finding | None:
        """The most severe error or warning (None when there are only info findings, or no comparison)."""
        if self.comparison is None:
            return None
        return next((f for f in self.comparison.top_findings(1) if f.severity is not Severity.INFO), None)


@dataclass(frozen=True)
class GateReport:
    manifest: Manifest
    results: tuple[PairResult, ...]
    models: int  # distinct models opened and profiled
    tokenizer_diffs: int  # distinct (target tokenizer, draft tokenizer) diffs computed
    seconds: float

    def count(self, outcome: Outcome) -> int:
        return sum(r.outcome is outcome for r in self.results)

    @property
    def exit_code(self) -> int:
        if self.count(Outcome.ERROR):
            return ExitCode.BAD_INPUT
        return ExitCode.FAILED if self.count(Outcome.FAIL) else ExitCode.OK


def run_gate(manifest: Manifest, *, probe: bool = True) -> GateReport:
    """Evaluate every pair; a model that cannot be read errors the pairs that name it and no others."""
    started = time.perf_counter()
    profiles: dict[str, ModelProfile | VocabcheckError] = {}
    cache = TokenizerDiffCache()
    results = []
    for pair in manifest.pairs:
        began = time.perf_counter()
        target = _profile(pair.target_spec, profiles)
        draft = _profile(pair.draft_spec, profiles)
        broken = next((p for p in (target, draft) if isinstance(p, VocabcheckError)), None)
        comparison = None
        if broken is None:
            try:
                comparison = judge(dataclasses.replace(target, spec=pair.target),
                                   dataclasses.replace(draft, spec=pair.draft), probe=probe, cache=cache)
                if comparison.translation is not None:  # the report needs its findings, not its tables
                    comparison.translation.drop_tables()
            except VocabcheckError as exc:  # a tokenizer that profiles but that the tokenizers library won't load
                broken = exc
        if broken is not None:
            results.append(PairResult(pair, Outcome.ERROR, None, (), broken, time.perf_counter() - began))
            continue
        failures = unmet(pair, comparison)
        results.append(PairResult(pair, Outcome.FAIL if failures else Outcome.PASS, comparison, failures, None,
                                  time.perf_counter() - began))
    return GateReport(manifest=manifest, results=tuple(results), models=len(profiles), tokenizer_diffs=len(cache),
                      seconds=time.perf_counter() - started)


def gate(manifest: str | Path, *, probe: bool = True) -> GateReport:
    """Load a manifest and evaluate it."""
    return run_gate(load_manifest(manifest), probe=probe)


def _profile(spec: str, profiles: dict[str, ModelProfile | VocabcheckError]) -> ModelProfile | VocabcheckError:
    if spec not in profiles:
        try:
            profiles[spec] = profile_of(spec)
        except VocabcheckError as exc:
            profiles[spec] = exc
    return profiles[spec]


def unmet(pair: PairSpec, comparison: Comparison) -> tuple[str, ...]:
    """One sentence per expectation of ``pair`` that ``comparison`` does not meet."""
    failures = []
    if not pair.expect.met_by(comparison.verdict):
        failures.append(f"expected {pair.expect.describe()}, got {comparison.verdict.value}: {comparison.reason}")
    if pair.strict:
        # the warning half of Comparison.failed(strict=True, allow=...), with the codes named
        codes = list(dict.fromkeys(f.code for f in comparison.findings
                                   if f.severity is Severity.WARNING and f.code not in pair.allow))
        if codes:
            failures.append(f"strict: {len(codes)} warning code{'s' if len(codes) != 1 else ''} not allowed: "
                            + ", ".join(codes))
    return tuple(failures)


__all__ = ["Expectation", "GateReport", "Manifest", "Outcome", "PairResult", "PairSpec", "gate", "load_manifest",
           "resolve_spec", "run_gate", "unmet"]
