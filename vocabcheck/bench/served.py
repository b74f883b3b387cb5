"""The table ``predict`` serves a pair with, measured by ``bench --served PREDICT_JSON``: the proof that the
recommended k per batch size is as fast as the best fixed k and never slower than no speculation.

``predict --json`` (or its ``--report``'s predict.json) holds one serving table per candidate: per measured batch
size the k to serve (0: no speculation), and vLLM's ``speculative_config`` for it
(:mod:`vocabcheck.predict.serving`). ``bench --served`` reads the tables of the methods it measures and:

- on vocabcheck's decoder, which runs one k per batch, measures the served k at each batch size among the fixed-k
  cells (a served k the bench's ``-k`` does not list is added to them), so the served row *is* that cell, measured
  side by side with every other k and plain decoding;
- with ``--compare-vllm``, starts the table as vLLM serves it — one engine, ``num_speculative_tokens`` the largest k
  and ``num_speculative_tokens_per_batch_size`` the schedule, scheduling up to the largest batch size — and runs
  every batch size through it (:func:`vocabcheck.bench.vllm_rows.run_vllm_rows`), so vLLM's own per-batch-size
  lookup picks the k, as it would in production.

:func:`served_rows` sets each served row against the best fixed k and plain decoding measured on the same engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..methods import AUTO, MAX_K, Method
from ..predict.serving import ServePlan, ServeRow

MAX_PREDICT_JSON_BYTES = 64 * 1024 * 1024  # predict's JSON is kilobytes; a file this large is not one
PREDICT_SCHEMA = "vocabcheck.predict/1"  # render.data's id of what predict writes (the views sit above bench)


def read_plans(path: Path, methods: Sequence[Method], draft: str | None = None) -> tuple[ServePlan, ...]:
    """The serving tables of ``predict``'s JSON at ``path`` for the ``methods`` a bench measures: n-gram lookup's
    for ``ngram``, and for ``draft`` the table of the bench's ``draft`` (predict ranks several drafts; the same
    directory, however it was spelled, or the same hub id). Anything but predict's JSON, no table for a method
    measured, or a predict run that served no table (its costs too noisy) is an :class:`InputError` naming the
    file."""
    from ..sources.base import read_json_object

    what = "the --served file (predict --json)"
    document = read_json_object(Path(path), MAX_PREDICT_JSON_BYTES, what)
    if document.get("schema") != PREDICT_SCHEMA:
        raise InputError(f"{what} is not predict's JSON (schema {document.get('schema')!r}, expected "
                         f"{PREDICT_SCHEMA!r})", path)
    tables = document.get("serve")
    if not isinstance(tables, list):
        raise InputError(f"{what} has no \"serve\" list", path)
    wanted = {Method.parse(m) for m in methods if Method.parse(m).proposes}
    plans = [_plan(table, index, path, what) for index, table in enumerate(tables)]
    if not plans:
        raise InputError(f"{what} serves no table (predict found its costs too noisy to rank, or no candidate had "
                         "a speedup)", path)
    chosen = tuple(p for p in plans if p.method in wanted and (not p.method.needs_draft or _same_model(p.draft, draft)))
    missing = sorted(wanted - {p.method for p in chosen})
    if missing:
        has = ", ".join(p.draft if p.method.needs_draft else p.method for p in plans)
        names = ", ".join(f"draft {draft}" if m == Method.DRAFT else m for m in missing)
        raise InputError(f"{what} serves no table for {names} (it has {has})", path)
    return chosen


def _same_model(named: str, draft: str | None) -> bool:
    if draft is None:
        return False
    if named == draft:
        return True
    a, b = Path(named), Path(draft)
    return a.exists() and b.exists() and a.resolve() == b.resolve()


def _plan(table: Any, index: int, path: Path, what: str) -> ServePlan:
    where = f"{what}'s serve[{index}]"
    if not isinstance(table, dict):
        raise InputError(f"{where} is not an object", path)
    try:
        method = Method.parse(table.get("method"))
    except Exception as exc:  # noqa: BLE001 - the method's own one-line reason
        raise InputError(f"{where} has no method bench runs ({exc})", path) from exc
    rows = table.get("per_batch_size")
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{where} has no per_batch_size rows", path)
    out = []
    for row in rows:
        size, k = (row.get("batch_size"), row.get("k")) if isinstance(row, dict) else (None, None)
        if type(size) is not int or size < 1 or type(k) is not int or not 0 <= k <= MAX_K:
            raise InputError(f"{where} has a row that is not a batch size (1 or more) and a k (0-{MAX_K}): {row!r}",
                             path)
        speedup = row.get("speedup")
        out.append(ServeRow(size, k, float(speedup) if isinstance(speedup, (int, float)) else 1.0))
    out.sort(key=lambda r: r.batch_size)
    if len({r.batch_size for r in out}) < len(out):
        raise InputError(f"{where} names one batch size twice", path)
    if table.get("pays") is False:  # predict serves it without speculation (its 0 rows cost more than the rest gain)
        out = [ServeRow(r.batch_size, 0, 1.0) for r in out]
    return ServePlan(draft=str(table.get("draft") or "ngram"), method=method, rows=tuple(out),
                     same_rows=bool(table.get("same_rows", True)))


def with_served_ks(ks: Sequence[int | str], plans: Sequence[ServePlan], batch_sizes: Sequence[int]
                   ) -> tuple[int | str, ...]:
    """``ks`` with every k a table serves at one of ``batch_sizes`` added (in order, ``auto`` last), so that
    vocabcheck's decoder measures the served cell beside every other."""
    served = {plan.k_at(b) for plan in plans for b in batch_sizes} - {0}
    fixed = sorted({k for k in ks if k != AUTO} | served)
    return tuple(fixed) + ((AUTO,) if AUTO in ks else ())


@dataclass(frozen=True)
class ServedRow:
    """One batch size of a served table on one engine: the k served there (0: no speculation), its speedup over
    plain decoding on that engine, and the best fixed k measured there (0 where none beat plain decoding)."""

    engine: str  # "vocabcheck" or "vLLM"
    method: str
    batch_size: int
    k: int
    speedup: float  # TPOT of plain decoding over the served one's
    best_k: int
    best_speedup: float  # the best of every fixed k's and plain decoding's (1.0)
    predicted_speedup: float  # what predict said of the served k

    @property
    def of_best(self) -> float:
        """The served table's speed over the best fixed k's (1.0: it serves the best)."""
        return self.speedup / self.best_speedup

    def document(self) -> dict[str, Any]:
        return {"engine": self.engine, "method": self.method, "batch_size": self.batch_size, "k": self.k,
                "speedup": self.speedup, "best_k": self.best_k, "best_speedup": self.best_speedup,
                "of_best": self.of_best, "predicted_speedup": self.predicted_speedup}


def served_rows(result, plans: Sequence[ServePlan]) -> tuple[ServedRow, ...]:
    """Every table at every batch size the bench measured, on vocabcheck's decoder (from its rows) and on vLLM (from
    the served engine's rows against vLLM's fixed-k and plain rows), where plain decoding was measured there too."""
    out = []
    for plan in plans:
        for b in result.plan.batch_sizes:
            k, predicted = plan.k_at(b), plan.row_at(b).speedup
            ours = {r.k: r.speedup for r in result.rows if r.method == plan.method and r.batch_size == b
                    and r.k != AUTO and r.speedup is not None}
            if result.row(Method.NONE, b) is not None and (k == 0 or k in ours):
                out.append(ServedRow("vocabcheck", plan.method, b, k, ours.get(k, 1.0), *_best(ours), predicted))
            plain = next((r for r in result.vllm_rows if r.method == Method.NONE and r.batch_size == b), None)
            served = next((r for r in result.vllm_rows if r.served and r.method == plan.method and r.batch_size == b),
                          None)
            if plain is None or served is None:
                continue
            cells = [r for r in result.vllm_rows if not r.served and r.method == plan.method and r.batch_size == b]
            if plain.beside(plan.method) and all(r.beside(plan.method) for r in cells):
                out.append(_side_by_side(plan, b, k, plain, cells, predicted))
                continue
            theirs = {r.k: plain.vllm_tpot_ms / r.vllm_tpot_ms for r in cells}
            out.append(ServedRow("vLLM", plan.method, b, k, plain.vllm_tpot_ms / served.vllm_tpot_ms, *_best(theirs),
                                 predicted))
    return tuple(out)


def _side_by_side(plan: ServePlan, b: int, k: int, plain, cells, predicted: float) -> ServedRow:
    """vLLM's served table at batch size ``b`` from the runs of its engine beside plain decoding's and each fixed k's
    (:attr:`vocabcheck.bench.vllm_rows.EngineRow.served_beside`): its speedup over plain decoding is the plain
    engine's TPOT over the served engine's in the same repeats; a fixed k's speed over the served table's is likewise
    its own pair's, and the best of those (and plain decoding's) is the best fixed k: every ratio is between two
    engines run one right after the other in the same repeats, not minutes apart. The best's speedup over plain
    decoding follows from the two (the served engine is the common reference)."""
    speedup = plain.vllm_tpot_ms / plain.beside(plan.method)
    over_served = {r.k: r.beside(plan.method) / r.vllm_tpot_ms for r in cells}  # a fixed k's speed over the table's
    best, best_over = 0, 1.0 / speedup  # plain decoding's speed over the table's
    for fixed, over in over_served.items():
        if over > best_over:
            best, best_over = fixed, over
    return ServedRow("vLLM", plan.method, b, k, speedup, best, speedup * best_over, predicted)


def _best(speedups: dict[int, float]) -> tuple[int, float]:
    """The fastest of the fixed ks (k → speedup over plain decoding) and plain decoding itself (k 0, 1.0)."""
    best = max(speedups, key=speedups.get, default=0)
    return (best, speedups[best]) if speedups.get(best, 0.0) > 1.0 else (0, 1.0)
