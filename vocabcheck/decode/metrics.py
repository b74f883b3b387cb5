"""What a generate call measured: tokens, proposals, acceptance and time, per row and in total.

Only emitted tokens count. A step verifies a row's proposals and emits its accepted proposals plus the target's own
token (the correction, or the bonus after a fully accepted run); when eos or the length budget cuts the row inside the
run, the last emitted token stands for the target's token and the proposals after it were never emitted, so they
count neither as drafted nor as accepted; proposals past the row's budget count as drafted neither there nor when the
row rejects earlier (``proposed`` counts everything proposed: what the controller chose). For every row, and so in
total:

    generated = first tokens + verifications + accepted
"""

from __future__ import annotations

from dataclasses import dataclass, field


# what became of a pair's kept step costs in a process (auto.costs.StepCosts.kept); merging batches, the later one
# (more worth saying) wins
KEPT_ORDER = ("none", "used", "replaced", "discarded")

@dataclass
class RowMetrics:
    """One row's counters: its first token (from prefill), its verification steps and what they emitted."""

    first_tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    first_at: float = 0.0  # seconds since the call started: the first token, and the latest emitted token
    last_at: float = 0.0
    proposed: int = 0  # tokens proposed, whether or not they could count (the controller's choice)
    unspeculated: int = 0  # verifications with no proposal (plain steps)
    outside_shared: int = 0  # translated drafts: emitted target tokens no shared token stands for
    reencodings: int = 0  # translated drafts: target text re-encoded with the draft's tokenizer

    def record_first(self, at: float) -> None:
        self.first_tokens, self.generated, self.first_at, self.last_at = 1, 1, at, at

    def record_step(self, proposed: int, accepted: int, emitted: int, at: float, room: int) -> tuple[int, int]:
        """A verification of ``proposed`` tokens that accepted ``accepted`` of them and emitted ``emitted`` tokens
        (``accepted + 1``, or fewer where the row ended inside the accepted run), with room for ``room`` more
        tokens before it. Proposals past the row's budget (beyond ``room - 1``) could never be emitted as proposals,
        so they count as drafted neither when the row rejects nor when it is cut inside an accepted run. Returns
        what counted: (drafted, accepted)."""
        if emitted == accepted + 1:
            judged, kept = min(proposed, max(room - 1, accepted)), accepted
        else:
            judged = kept = emitted - 1
        self.steps += 1
        self.proposed += proposed
        self.unspeculated += proposed == 0
        self.drafted += judged
        self.accepted += kept
        self.generated += emitted
        _grow(self.drafted_at, judged)
        _grow(self.accepted_at, kept)
        if emitted:
            self.last_at = at
        return judged, kept

    @property
    def proposal_length(self) -> float:
        """Mean tokens proposed per verification (before the budget cut)."""
        return self.proposed / self.steps if self.steps else 0.0

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first: NaN for a row with one token."""
        return (self.last_at - self.first_at) / (self.generated - 1) if self.generated > 1 else float("nan")


def _grow(counts: list[int], positions: int) -> None:
    """Count one more proposal at each of the first ``positions`` positions."""
    counts.extend([0] * (positions - len(counts)))
    for j in range(positions):
        counts[j] += 1


@dataclass(frozen=True)
class EngineCounts:
    """Drafted and accepted tokens as an engine that counts them itself reports them (vLLM's spec-decode counters):
    totals, and by position where the engine gives them."""

    drafted: int
    accepted: int
    drafted_at: tuple[int, ...] = ()
    accepted_at: tuple[int, ...] = ()

    def plus(self, other: EngineCounts | None) -> EngineCounts:
        if other is None:
            return self

        def add(a, b):
            return tuple(x + y for x, y in zip(a + (0,) * (len(b) - len(a)), b + (0,) * (len(a) - len(b))))
        return EngineCounts(self.drafted + other.drafted, self.accepted + other.accepted,
                            add(self.drafted_at, other.drafted_at), add(self.accepted_at, other.accepted_at))


@dataclass
class Metrics:
    """Counters and timers of one or more generate calls. Times are seconds; ``tpot_ms`` is the mean over rows of
    (last token time - first token time) / (tokens - 1)."""

    method: str
    k: int | str  # the fixed proposal length, "auto", or 0 for plain decoding
    batch_size: int
    rows: list[RowMetrics] = field(default_factory=list)
    translated: bool = False
    verify_passes: int = 0  # target forwards after prefill (one per step, whatever the batch)
    draft_passes: int = 0  # draft forwards after prefill
    plain_steps: int = 0  # steps where no row proposed anything (no draft forward, a plain target step)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    target_s: float = 0.0
    total_s: float = 0.0
    ttft_s: float = 0.0
    engine_counts: EngineCounts | None = None  # an engine's own draft counters: they replace the rows' sums
    # -k auto: what became of the step costs an earlier process kept (decode.auto.costs.KEPT_STATES); None otherwise
    kept_state: str | None = None

    def _sum(self, name: str) -> int:
        return sum(getattr(row, name) for row in self.rows)

    @property
    def first_tokens(self) -> int:
        return self._sum("first_tokens")

    @property
    def steps(self) -> int:
        """Verifications, summed over rows."""
        return self._sum("steps")

    @property
    def drafted(self) -> int:
        return self.engine_counts.drafted if self.engine_counts is not None else self._sum("drafted")

    @property
    def accepted(self) -> int:
        return self.engine_counts.accepted if self.engine_counts is not None else self._sum("accepted")

    @property
    def generated(self) -> int:
        return self._sum("generated")

    def _positions(self, name: str) -> list[int]:
        totals = [0] * max([self.k if isinstance(self.k, int) else 0]
                           + [len(getattr(row, name)) for row in self.rows])
        for row in self.rows:
            for j, count in enumerate(getattr(row, name)):
                totals[j] += count
        return totals

    @property
    def proposed(self) -> int:
        return self.engine_counts.drafted if self.engine_counts is not None else self._sum("proposed")

    @property
    def proposal_length(self) -> float:
        """Mean tokens proposed per row and verification: what the controller chose (k for a fixed k)."""
        return self.proposed / self.steps if self.steps else 0.0

    @property
    def outside_shared(self) -> int:
        return self._sum("outside_shared")

    @property
    def reencodings(self) -> int:
        return self._sum("reencodings")

    @property
    def outside_shared_share(self) -> float:
        """The share of generated tokens that a translated draft could not have proposed."""
        return self.outside_shared / self.generated if self.generated else 0.0

    @property
    def reencodings_per_100(self) -> float:
        return 100.0 * self.reencodings / self.generated if self.generated else 0.0

    @property
    def drafted_at(self) -> list[int]:
        return list(self.engine_counts.drafted_at) if self.engine_counts is not None else self._positions("drafted_at")

    @property
    def accepted_at(self) -> list[int]:
        return list(self.engine_counts.accepted_at) if self.engine_counts is not None else self._positions("accepted_at")

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """1 + accepted drafts per verification, as vLLM reports it."""
        return 1.0 + self.accepted / self.steps if self.steps else 1.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def row_tpot_s(self) -> list[float]:
        return [row.tpot_s for row in self.rows]

    @property
    def tpot_ms(self) -> float:
        rows = [t for t in self.row_tpot_s if t == t]  # NaN for rows that produced one token
        return 1000.0 * sum(rows) / len(rows) if rows else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.total_s if self.total_s else 0.0

    @property
    def other_s(self) -> float:
        return max(0.0, self.total_s - self.prefill_s - self.draft_s - self.target_s)

    def merge(self, other: Metrics) -> Metrics:
        """The metrics of two runs one after the other (batches of one `run`)."""
        return Metrics(
            method=self.method, k=self.k, batch_size=max(self.batch_size, other.batch_size),
            translated=self.translated or other.translated,
            rows=self.rows + other.rows, verify_passes=self.verify_passes + other.verify_passes,
            draft_passes=self.draft_passes + other.draft_passes, plain_steps=self.plain_steps + other.plain_steps,
            prefill_s=self.prefill_s + other.prefill_s,
            draft_s=self.draft_s + other.draft_s, target_s=self.target_s + other.target_s,
            total_s=self.total_s + other.total_s,
            ttft_s=min((m.ttft_s for m in (self, other) if m.rows), default=0.0),
            engine_counts=other.engine_counts if self.engine_counts is None else
            self.engine_counts.plus(other.engine_counts),
            kept_state=max((m.kept_state for m in (self, other) if m.kept_state is not None), key=KEPT_ORDER.index,
                           default=None),
        )
