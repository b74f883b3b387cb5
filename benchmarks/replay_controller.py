"""``-k auto``'s controller replayed without the models' noise: what it takes against each fixed k, on the pair's
own greedy continuations, every step priced from the same measured table of step times.

Acceptance is exact: greedy speculation emits the target's own chain, and a step that starts at position p of a row
accepts the run of proposals that match it from there (teacher-forced passes, :mod:`vocabcheck.predict.steps`, as
`predict` counts them). Step times are measured first, with the real models on this machine: every width 0 … 8 as a
fixed k over every prompt at each batch size, the median of the decoder's own steps per (live rows, width), as the
engine's clock times them for the controller (``--table`` keeps them, so that a second replay reuses them). The
controller runs unchanged (:class:`vocabcheck.decode.auto.controller.AdaptiveLength`): it starts from the fit `-k auto`
keeps for the pair on this machine (``step-costs.json``; none kept: the prior), observes the table's times as it
would the clock's, and runs every batch twice (the first warms its fit, as the bench's warm-up does). So the replay
separates the choice — how acceptance and cost are modelled — from the machine's noise between calls, which on a
shared 2-core machine is larger than the differences being judged. TPOT is the bench's: per row, from its first token
to its last over the tokens after the first, averaged over rows. ``--variants`` adds controllers that model
acceptance or price steps otherwise (one pooled rate for every row; acceptance shaped by position; the fit's price
corrected per shape by what each shape measured), ``--jitter`` lets the controllers observe step times with a
shared machine's spread (the clock stays the table's), and ``oracle`` is a bound: each
step's best width knowing what every row will accept; ``auto, first pass`` is the controller's first pass, from its
prior (or the kept fit).

    python -m benchmarks.replay_controller [TARGET DRAFT] --batch-sizes 1,4,16 --prompts benchmarks/prompts-16.jsonl
        --table /tmp/step-table.json [--variants]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from vocabcheck.decode.auto import controller as control
from vocabcheck.decode import engine
from vocabcheck.decode.auto.controller import AdaptiveLength, FixedLength
from vocabcheck.decode.auto.costs import STORE, StepCosts, draft_share, stored_key
from vocabcheck.decode.auto.tuning import TUNING
from vocabcheck.decode.load.loading import read_prompt_file
from vocabcheck.decode.mapping import PaddedMapping
from vocabcheck.decode.metrics import RowMetrics
from vocabcheck.decode.options import DecodeOptions
from vocabcheck.decode.sampling import Sampling
from vocabcheck.decode.session import RunRequest, start_session
from vocabcheck.demo.pair import demo_pair
from vocabcheck.predict import continuations, teacher
from vocabcheck.predict.ngram_replay import ngram_proposals, ngram_runs
from vocabcheck.predict.steps import RowRuns

K_MAX = 8
Policy = Callable[[StepCosts, int, "StepTable"], object]  # (costs, rows, prices) -> a controller for one batch


class Fixed(FixedLength):
    def __init__(self, k: int):
        self.k = k

    def choose(self, reach: Sequence[int], forwards_per_position: int) -> int:
        return min(self.k, max(reach, default=0))


class Oracle(FixedLength):
    """Knows how many proposals each row will accept this step (``matched``, set by the replay): the width with the
    most emitted tokens per second of this step alone (a bound, and not the best over a whole call)."""

    def __init__(self, table: "StepTable"):
        self.table, self.matched = table, []

    def choose(self, reach: Sequence[int], forwards_per_position: int) -> int:
        top = min(K_MAX, max(reach, default=0))
        return max(range(top + 1), key=lambda w: sum(min(m, w, r) + 1 for m, r in zip(self.matched, reach))
                   / self.table.seconds(len(reach), w))


class Pooled(AdaptiveLength):
    """A variant: every row's acceptance the batch's pooled rate."""

    def _best(self, rates, reach, forwards_per_position, margin=TUNING.gain_margin):
        a = sum(self.acceptance.accepted) + self.acceptance.prior[0]
        r = sum(self.acceptance.rejected) + self.acceptance.prior[1]
        return super()._best([a / (a + r)] * len(rates), reach, forwards_per_position, margin)


class PerShape(AdaptiveLength):
    """A variant: the fit's price of each shape (live rows, draft forwards, slots) corrected by the decayed ratio of
    the times it measured to the times it was priced at (a step's time need not be linear in its width)."""

    KEEP = 0.95

    def __init__(self, rows: int, k_max: int, costs: StepCosts):
        super().__init__(rows, k_max, costs)
        self.ratios = costs.__dict__.setdefault("replay_ratios", {})  # kept with the costs, across calls

    def _best(self, rates, reach, forwards_per_position, margin=TUNING.gain_margin):
        live, fitted = len(reach), self.costs.pricer
        price = fitted(live)
        self.costs.pricer = lambda rows=None: lambda d, s: price(d, s) * self.ratios.get((live, d, s), 1.0)
        try:
            return super()._best(rates, reach, forwards_per_position, margin)
        finally:
            del self.costs.pricer  # the class's own again

    def observe_step(self, draft: int, slots: int, seconds: float, live: int, catch_up: int = 0) -> None:
        ratio = seconds / self.costs.pricer(live)(draft, slots)
        old = self.ratios.get((live, draft, slots))
        self.ratios[(live, draft, slots)] = ratio if old is None else old * self.KEEP + ratio * (1 - self.KEEP)
        super().observe_step(draft, slots, seconds, live, catch_up)


class Shaped(AdaptiveLength):
    """A variant: acceptance shaped by position — the rate at proposal j given the ones before it were accepted,
    pooled over rows (decayed), relative to the pooled rate over every position, scales each row's own rate."""

    KEEP = 0.99

    def __init__(self, rows: int, k_max: int, costs: StepCosts):
        super().__init__(rows, k_max, costs)
        self.judged, self.kept = [0.0] * (k_max + 1), [0.0] * (k_max + 1)

    def observe_row(self, row: int, judged: int, kept: int) -> None:
        super().observe_row(row, judged, kept)
        for j in range(1, min(kept + 1, judged) + 1):
            self.judged[j] = self.judged[j] * self.KEEP + 1.0
            self.kept[j] = self.kept[j] * self.KEEP + (1.0 if j <= kept else 0.0)

    def _best(self, rates, reach, forwards_per_position, margin=TUNING.gain_margin):
        pooled = (sum(self.kept) + 1.0) / (sum(self.judged) + 2.0)
        shape = [(self.kept[j] + pooled) / (self.judged[j] + 1.0) / pooled for j in range(self.k_max + 1)]
        rows, widths = len(reach), min(self.k_max, max(reach, default=0))
        # expected_tokens with a rate per position: each row's terms built up one width at a time, as AdaptiveLength
        terms, tokens, price = [1.0] * rows, float(rows), self.costs.pricer(rows)
        plain_rate = tokens / price(0, rows)
        best, best_rate = 0, plain_rate * (1.0 + margin)
        for width in range(1, widths + 1):
            for i in range(rows):
                if width <= reach[i]:
                    terms[i] *= min(0.995, rates[i] * shape[width])
                    tokens += terms[i]
            rate = tokens / price(width * forwards_per_position, rows * (width + 1))
            if rate > best_rate * (1.0 + 1e-9):
                best, best_rate = width, rate
        return best, best_rate / plain_rate


class StepTable:
    """Measured step times: the median seconds of the decoder's own steps per (live rows, width), from fixed-k calls
    of the real models (width 0: no speculation); widths not met at a live count are interpolated in width, live
    counts not met take the nearest larger one's times."""

    def __init__(self, times: dict[tuple[int, int], float]):
        self.times = times
        self.widths = {n: sorted(w for m, w in times if m == n) for n in {m for m, _ in times}}  # live → widths met

    @classmethod
    def of(cls, samples: dict[tuple[int, int], list[float]]) -> "StepTable":
        return cls({key: statistics.median(v) for key, v in samples.items()})

    def state(self) -> list:
        return [[live, width, t] for (live, width), t in sorted(self.times.items())]

    def seconds(self, live: int, width: int, catch_up: int = 0) -> float:
        sizes = sorted(self.widths)
        n = next((s for s in sizes if s >= live and len(self.widths[s]) >= 3), sizes[-1])
        below = [w for w in self.widths[n] if w <= width]
        above = [w for w in self.widths[n] if w > width]
        if below and below[-1] == width:
            t = self.times[(n, width)]
        else:  # between the nearest measured widths, or on from the two nearest
            a, b = (below[-1], above[0]) if below and above else tuple(below[-2:] if below else above[:2])
            ta, tb = self.times[(n, a)], self.times[(n, b)]
            t = ta + (tb - ta) * (width - a) / (b - a)
        if catch_up:  # a caught-up position: a quarter of what one more draft position adds
            t += catch_up * TUNING.catch_up_share * max(0.0, self.seconds(live, 2) - self.seconds(live, 1))
        return t


def measure_table(session, prompt_ids, method: str, batch: int, tokens: int) -> StepTable:
    """Every width 0 … K_MAX as a fixed k over every prompt (after a short call of the first batch that warms the
    shapes up); each step's time as the engine's clock times it for the controller (from the end of the previous step
    to the end of this one)."""
    samples: dict[tuple[int, int], list[float]] = defaultdict(list)
    record: list[tuple[int, int, float]] = []
    observe = engine.observe_time

    def traced(state, width, live, at, catch_up=0):
        if state.stamp is not None:
            record.append((live, width, at - state.stamp))
        return observe(state, width, live, at, catch_up=catch_up)

    engine.observe_time = traced
    try:
        for width in range(K_MAX + 1):
            options = DecodeOptions(method=method if width else "none", k=max(width, 1), max_new_tokens=tokens,
                                    ignore_eos=True)
            session.generate_ids(prompt_ids[:batch], replace(options, max_new_tokens=8))  # warms the shapes up
            record.clear()
            for begin in range(0, len(prompt_ids), batch):
                session.generate_ids(prompt_ids[begin:begin + batch], options)
            for live, w, seconds in record:
                samples[(live, w)].append(seconds)
    finally:
        engine.observe_time = observe
    return StepTable.of(samples)


def replay_batch(rows: Sequence[RowRuns], table: StepTable, policy, fpp: int,
                 widths: list[int] | None = None, jitter: Callable[[], float] = lambda: 1.0) -> list[float]:
    """The batch's rows' TPOTs (seconds) under ``policy``, every step's time from ``table``, counted by the decoder's
    own :class:`RowMetrics`; the policy observes them as the engine would tell it."""
    metrics = [RowMetrics() for _ in rows]
    for row_metrics in metrics:
        row_metrics.record_first(0.0)
    live = [i for i, row in enumerate(rows) if row.length > 1]
    clock, backlog = 0.0, 2
    while live:
        at = [metrics[i].generated for i in live]  # each live row's position: the tokens it emitted so far
        rooms = [rows[i].budget - p for i, p in zip(live, at)]
        limit = min(K_MAX, max(rooms) - 1)
        reach = [min(rows[i].proposal(p, limit)[0], room - 1) for i, p, room in zip(live, at, rooms)]
        if isinstance(policy, Oracle):
            policy.matched = [rows[i].matched[p] for i, p in zip(live, at)]
        width = policy.choose(reach, fpp) if limit > 0 else 0  # as the engine asks: a step with nothing to propose too
        width = min(width, max(reach))
        n = len(live)
        catch_up = max(0, backlog - 2) if width and fpp else 0
        seconds = table.seconds(n, width, catch_up)
        clock += seconds
        if widths is not None:
            widths.append(width)
        backlog = 2 if width else backlog + 1
        for position, (i, p) in enumerate(zip(live, at)):
            made, m = rows[i].proposal(p, min(width, reach[position])) if width > 0 else (0, 0)
            kept = min(m + 1, rows[i].length - p)  # eos or the budget may end the row inside its accepted run
            policy.observe_row(position, *metrics[i].record_step(made, m, kept, clock, rooms[position]))
        policy.observe_step(width * fpp, n * (width + 1), seconds * jitter(), n, catch_up)
        stay = [position for position, i in enumerate(live) if metrics[i].generated < rows[i].length]
        if len(stay) < n:
            policy.keep_rows(stay)
            live = [live[position] for position in stay]
    return [metrics[i].tpot_s for i in range(len(rows)) if rows[i].length > 1]


def tpot_ms(rows: Sequence[RowRuns], batch_size: int, table: StepTable, costs: StepCosts, make: Policy,
            fpp: int, passes: int = 2, sigma: float = 0.0, seed: int = 0) -> tuple[float, list[int]]:
    """The bench's TPOT over every row, in batches of ``batch_size``, a policy per batch (a bench call), on the last
    of ``passes`` passes (the earlier ones warm the controller's costs, as the bench's warm-up does); and that pass's
    widths, step by step. ``sigma``: what the controller observes is each step's time times a log-normal factor of that
    spread (``seed`` fixes them), the clock the table's own."""
    own = copy.deepcopy(costs)
    noise = random.Random(seed)
    jitter = (lambda: noise.lognormvariate(0.0, sigma)) if sigma else (lambda: 1.0)
    for _ in range(passes):
        tpots, widths = [], []
        for begin in range(0, len(rows), batch_size):
            group = rows[begin:begin + batch_size]
            tpots += replay_batch(group, table, make(own, len(group), table), fpp, widths, jitter)
    return 1000 * statistics.fmean(tpots), widths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="default: the demo pair's target")
    parser.add_argument("draft", nargs="?", help="default: the demo pair's draft")
    parser.add_argument("--batch-sizes", default="1,4,16")
    parser.add_argument("--prompts", type=Path, default=Path("benchmarks/prompts-16.jsonl"))
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--table", type=Path, help="JSON file of one pair's step times on this machine: read where "
                        "it holds a method and batch size, else measured and written (a second replay reuses them)")
    parser.add_argument("--kept-costs", action="store_true", help="start the controller from the fit kept on "
                        "this machine (step-costs.json) instead of its prior")
    parser.add_argument("--variants", action="store_true", help="also replay controllers that model acceptance "
                        "or price steps otherwise")
    parser.add_argument("--jitter", type=float, default=0.0, help="the controllers observe each step's time times a "
                        "log-normal factor of this spread (0.1: about 10 %%), as a shared machine's clock shows it")
    parser.add_argument("--seed", type=int, default=0, help="the jitter's seed")
    args = parser.parse_args()
    if args.target is None:
        pair = demo_pair()
        args.target, args.draft = str(pair.target), str(pair.draft)
    session = start_session(RunRequest(target=args.target, draft=args.draft, methods=("none", "ngram", "draft")))
    options = DecodeOptions(method="draft", max_new_tokens=args.max_new_tokens, ignore_eos=True)
    prompt_ids = session.encode(read_prompt_file(args.prompts), False)
    greedy = continuations.generated(session, prompt_ids, options, Sampling(), 16)
    chains, budgets = greedy.chains, greedy.budgets
    mapping = PaddedMapping(session.comparison.alignment, session.draft_model, session.device)
    matched = teacher.greedy_streaks(session.draft_model, mapping, chains, session.device)
    runs = {"draft": [RowRuns(len(c.tokens), b, m) for c, b, m in zip(chains, budgets, matched)],
            "ngram": [ngram_runs(c, ngram_proposals(c, options.ngram_min, options.ngram_max, K_MAX), b)
                      for c, b in zip(chains, budgets)]}
    policies: dict[str, Policy] = {f"k={k}": (lambda costs, rows, table, k=k: Fixed(k)) for k in (1, 2, 4, 8)}
    policies["auto"] = lambda costs, rows, table: AdaptiveLength(rows, K_MAX, costs)
    policies["auto, first pass"] = policies["auto"]
    if args.variants:
        policies["auto, pooled rate"] = lambda costs, rows, table: Pooled(rows, K_MAX, costs)
        policies["auto, shaped by position"] = lambda costs, rows, table: Shaped(rows, K_MAX, costs)
        policies["auto, priced per shape"] = lambda costs, rows, table: PerShape(rows, K_MAX, costs)
    policies["oracle"] = lambda costs, rows, table: Oracle(table)
    tables = json.loads(args.table.read_text()) if args.table and args.table.exists() else {}
    print(f"{len(chains)} prompts, {args.max_new_tokens} tokens, greedy; TPOT ms, every step priced from the "
          f"measured table; observed with jitter {args.jitter:g} (seed {args.seed})")
    print("| method | batch | " + " | ".join(policies) + " | auto / best k | auto: mean width, plain steps |")
    print("|---" * (len(policies) + 4) + "|")
    for method in ("ngram", "draft"):
        draft = session.draft_model if method == "draft" else None
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            costs = StepCosts(draft_share(session.target_model, draft), batch, K_MAX,
                              stored_key(session.target_model, draft, f"{method}/greedy", batch, K_MAX))
            if args.kept_costs:
                costs.restore(STORE.get(costs.key))
            fpp = 1 if method == "draft" else 0
            name = f"{method} {batch}"
            if name not in tables:
                tables[name] = measure_table(session, prompt_ids, method, batch, args.max_new_tokens).state()
                if args.table:
                    args.table.write_text(json.dumps(tables))
            table = StepTable({(live, width): t for live, width, t in tables[name]})
            replayed = {name: tpot_ms(runs[method], batch, table, costs, make, fpp, 1 if "first" in name else 2,
                                      args.jitter, args.seed) for name, make in policies.items()}
            ms = {name: value[0] for name, value in replayed.items()}
            best = min(ms[f"k={k}"] for k in (1, 2, 4, 8))
            widths = replayed["auto"][1]
            print(f"| {method} | {batch} | " + " | ".join(f"{v:.2f}" for v in ms.values())
                  + f" | {ms['auto'] / best:.3f} | {statistics.fmean(widths):.2f}, {widths.count(0)} of {len(widths)}"
                  + " |")


if __name__ == "__main__":
    main()
