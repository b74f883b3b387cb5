"""The output head on the CPU: the same product as the model's ``lm_head``, through the fastest kernel for each shape.

With a vocabulary of 150,000 rows the output projection is most of a small model's step, and on the CPU its cost
depends on the kernel far more than on the row count. torch's ``F.linear`` goes to MKL, which on the AMD EPYC cores
this project measures on multiplies 5 rows by Qwen2.5-7B's 152,064 × 3,584 head in 491 ms and 1 row in 113 ms; oneDNN
(torch's other CPU library, as torch.compile uses it) takes 165 ms and 81 ms; MKL with the operands the other way
round (``W @ h.T``) is the fastest for 2 to 8 rows of the demo's 256-wide head. No one kernel wins every shape, and
which one wins depends on the CPU, so :class:`TunedHead` times the candidates on the first calls of each size of row
count and head shape, and keeps the fastest (as cuDNN's benchmark mode does, but timing the calls that serve the size
rather than extra products). The candidates agree to float32 rounding. ``benchmarks/head_layout.py`` measures every
width and row count; reports/head-layout.md has the figures.

Timing each size with extra products beside its first call cost 100–500 ms for the demo's 152,064 × 256 head at 16–128
rows (several times the step it serves; a first batch-16 draft call on a machine spent 1.6–2.1 s on it:
``benchmarks/step_trace.py``), and a cold ``vocabcheck run`` meets a new size at every batch shape: rows leaving the
batch, each verification width. So the calls themselves are the timings (a size met once costs one product), and the
choices are kept on disk, ``head-kernels.json`` (:mod:`vocabcheck.decode.cpu.measured`), per machine (processor model,
torch version, threads), head shape and dtype: a process times only the sizes no earlier process on this machine
timed. Only a clear win is kept (the winner at least 20 % faster than the runner-up): where kernels are close, a busy
moment could have picked either, and each process times that size again. Delete the file to time them again. A file
that cannot be read or written costs only the timing; a name in it that is not a candidate here is ignored.

The engine uses :func:`cpu_head` only where it is the same product: float32 weights on the CPU, architectures whose
forward is exactly ``lm_head(last_hidden_state)`` (no soft-capping, logit scale or bias). Everything else runs the
model's own forward.
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import Callable

import torch

from .measured import MachineStore

# Causal LMs whose forward is exactly ``lm_head(last_hidden_state)``: no soft-capping, logit scale or bias (checked
# against their transformers source). Others keep the model's own forward.
PLAIN_HEAD = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                        "Phi3ForCausalLM", "GemmaForCausalLM"})


def onednn_linear(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(hidden, weight)`` through oneDNN: [..., H] × [V, H] to [..., V], float32 on the CPU."""
    return torch.ops.mkldnn._linear_pointwise(hidden, weight, None, "none", [], "")


@functools.cache
def onednn_available() -> bool:
    """Whether this torch has oneDNN's linear and it gives ``F.linear``'s result (to float32 rounding) here."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(1031, 67, generator=generator)
    hidden = torch.randn(3, 5, 67, generator=generator)[:, 1:]  # not contiguous, as the engine's slices are
    try:
        with torch.inference_mode():
            out = onednn_linear(hidden, weight)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return out.shape == (3, 4, 1031) and torch.allclose(out, torch.nn.functional.linear(hidden, weight),
                                                          rtol=1e-5, atol=1e-5)


def mkl_linear(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The model's own product: ``F.linear`` (MKL on x86)."""
    return torch.nn.functional.linear(hidden, weight)


def mkl_columns(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The same product as ``W @ h.T``: MKL picks another kernel for this layout, faster for a few rows."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    return (weight @ flat.T).T.contiguous().reshape(*hidden.shape[:-1], weight.shape[0])


def candidates() -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    found = {"mkl": mkl_linear, "mkl-columns": mkl_columns}
    if onednn_available():
        found["onednn"] = onednn_linear
    return found


class TunedHead:
    """``lm_head`` with the model's own weight, hidden states [B, n, H] to logits [B, n, V], through the kernel that
    was fastest in this process for that many rows (B·n, in buckets: 1, 2, 3–4, 5–8, 9–16, ...) and this head's
    shape. Heads of the same shape share their choices (:data:`_CHOICES`).

    A bucket is timed on the calls that serve it, not beside them. Its first ``RACE_AFTER - 1`` calls run the
    likeliest winner (:data:`PREFERENCE`) untimed: a size met once or rarely (a probe's verification width, a batch's
    last rows, an occasional plain step among proposing ones) costs one product through it, and never a slower
    candidate. From then on, until its choice is made, each of its calls at the row count the race started at runs
    the candidate with the fewest timings and returns that product, so a size met often costs only the slower
    candidates' extra time on a few calls. Calls at the bucket's other row counts run the fastest so far, untimed
    (times at different row counts do not compare). After each candidate has run once, any over twice the fastest is
    dropped; after ``rounds`` timings of each one left, the fastest (by its best time: the first doubles as its
    warm-up, and the best is the figure least disturbed by a busy machine) serves the bucket from then on."""

    rounds = 2
    races = 0  # timed calls so far, in every head of this process
    unsettled = 0  # calls so far, in every head of this process, for a size whose kernel is not chosen yet (the
    # likeliest winner untimed, or a candidate being timed), each size's first UNSETTLED_CALLS: a step that made one
    # costs what it will not cost once the size is chosen, so the controller does not learn from it
    # (:func:`unsettled_calls`, read by -k auto)

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self.kernels = candidates()
        # the order a new size tries them in: the likeliest winner first
        self.order = sorted(self.kernels, key=lambda n: PREFERENCE.index(n) if n in PREFERENCE else len(PREFERENCE))
        self.large = next(name for name in LARGE_PREFERENCE if name in self.kernels)  # above RACE_ROWS rows
        key = (tuple(weight.shape), weight.dtype)
        if key not in _CHOICES:
            _CHOICES[key] = {bucket: name for bucket, name in stored_choices(key).items() if name in self.kernels}
        self.choice: dict[int, str] = _CHOICES[key]  # bucket → name
        self.key = key
        self.seen: dict[int, int] = {}  # bucket → calls so far
        # bucket → (the row count it is timed at, {candidate still in the race: its timings so far})
        self.trials: dict[int, tuple[int, dict[str, list[float]]]] = {}

    @staticmethod
    def bucket(rows: int) -> int:
        return rows if rows <= 2 else 1 << (rows - 1).bit_length()

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.numel() // hidden.shape[-1]
        bucket = self.bucket(rows)
        name = self.choice.get(bucket)
        if name is not None:
            return self.kernels[name](hidden, self.weight)
        if bucket > RACE_ROWS:  # no race: the likeliest winner
            return self.kernels[self.large](hidden, self.weight)
        seen = self.seen[bucket] = self.seen.get(bucket, 0) + 1
        if seen <= UNSETTLED_CALLS:
            TunedHead.unsettled += 1
        if seen < RACE_AFTER:  # met rarely so far: the likeliest winner, untimed
            return self.kernels[self.order[0]](hidden, self.weight)
        timed_rows, race = self.trials.setdefault(bucket, (rows, {name: [] for name in self.order}))
        if rows != timed_rows:  # the fastest so far (the likeliest winner before any is timed)
            return self.kernels[min(race, key=lambda n: min(race[n], default=float("inf")))](hidden, self.weight)
        name = min(race, key=lambda n: len(race[n]))  # fewest timings; on a tie the likeliest winner
        TunedHead.races += 1
        start = time.perf_counter()
        out = self.kernels[name](hidden, self.weight)
        seconds = time.perf_counter() - start
        race[name].append(seconds)
        if len(race[name]) == 1 and all(race.values()):  # every candidate timed once: drop the far slower ones
            fastest = min(times[0] for times in race.values())
            for slow in [n for n, times in race.items() if times[0] > 2 * fastest]:
                del race[slow]
        if all(len(times) >= self.rounds for times in race.values()):
            self._decide(bucket, {n: min(times) for n, times in race.items()})
        return out

    def _decide(self, bucket: int, best: dict[str, float]) -> None:
        """The fastest kernel serves ``bucket`` from now on; it is kept for later processes only where it won by
        ``DECISIVE`` or more over the runner-up (where kernels are close, a busy moment could have picked either,
        and a choice kept on disk would outlive the moment; such a bucket is timed again in each process)."""
        ranked = sorted(best, key=best.get)
        self.choice[bucket] = ranked[0]
        del self.trials[bucket]
        if len(ranked) == 1 or best[ranked[0]] <= DECISIVE * best[ranked[1]]:
            kept = stored_choices(self.key)
            kept[bucket] = ranked[0]
            KernelFile.put(head_name(self.key), {str(b): n for b, n in sorted(kept.items())})


RACE_AFTER = 4  # a bucket's calls before its candidates are timed
UNSETTLED_CALLS = 16  # a bucket's calls that count as unsettled (TunedHead.unsettled) while it has no choice: a race
# takes RACE_AFTER - 1 + 6 of them where its row count recurs; one whose row count is met rarely may never decide, and
# must not keep the controller from learning what the bucket's steps cost for the rest of the process

RACE_ROWS = 8
"""The largest bucket whose kernels are timed. Above it one kernel serves (:data:`LARGE_PREFERENCE`): at 16 to 80 rows
oneDNN was the fastest for all four head widths measured (reports/head-layout.md; MKL within 10 % once, at 16 rows
of a 32-wide head), and a race there is dear: the slower candidates cost 35–70 ms more than oneDNN per call at 80 rows
of the demo's head, and a fresh batch-16 call with the draft spent 50–115 ms of 1.6 s on them."""

LARGE_PREFERENCE = ("onednn", "mkl")  # above RACE_ROWS (W @ h.T is the slowest there: 163 ms against 129 and 94)

PREFERENCE = ("onednn", "mkl-columns", "mkl")
"""The order in which a new size tries the kernels: oneDNN was fastest or near it for most sizes on the machines
measured (reports/head-layout.md), so a size met once most likely gets the best product."""


DECISIVE = 0.8  # a kernel kept on disk was at least this much faster (in time) than the runner-up


KernelFile = MachineStore("head-kernels.json")
"""``{"version": 1, "machines": {machine: {"152064x256 float32": {"16": "onednn"}}}}``: the kernel each earlier
process on a machine timed fastest for each head and bucket."""


def unsettled_calls() -> int:
    """Calls so far, in every head of this process, for a size whose kernel is not chosen yet: a step that made one
    costs what it will not cost once the size is chosen (``-k auto`` does not learn from it)."""
    return TunedHead.unsettled


def head_name(key: tuple[tuple[int, ...], torch.dtype]) -> str:
    shape, dtype = key
    return "x".join(map(str, shape)) + " " + str(dtype).removeprefix("torch.")


def stored_choices(key) -> dict[int, str]:
    """This machine's kept choices for one head: {bucket: kernel name} (empty where there are none)."""
    found = KernelFile.get(head_name(key))
    if not isinstance(found, dict):
        return {}
    return {int(bucket): name for bucket, name in found.items()
            if isinstance(bucket, str) and bucket.isascii() and bucket.isdigit() and len(bucket) <= 6
            and isinstance(name, str)}


# (head shape, dtype) → {bucket: kernel name}: this machine's choices (from KernelFile), and those timed since
_CHOICES: dict[tuple[tuple[int, ...], torch.dtype], dict[int, str]] = {}
_HEADS: "weakref.WeakKeyDictionary[torch.nn.Linear, TunedHead]" = weakref.WeakKeyDictionary()  # module → head


def cpu_head(model) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The tuned head for ``model`` (one per lm_head module and weight, kept while the module lives), or None where
    the model's own forward must compute its logits."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if (type(model).__name__ not in PLAIN_HEAD or not isinstance(head, torch.nn.Linear) or head.bias is not None
            or head.weight.device.type != "cpu" or head.weight.dtype != torch.float32
            or not hasattr(model, "get_decoder")):
        return None
    tuned = _HEADS.get(head)
    if tuned is None or tuned.weight is not head.weight:
        tuned = _HEADS[head] = TunedHead(head.weight)
    return tuned
