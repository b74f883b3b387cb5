"""The output head on the CPU: the same product as the model's ``lm_head``, through the fastest kernel for each shape.

With a vocabulary of 150,000 rows the output projection is most of a small model's step, and on the CPU its cost
depends on the kernel far more than on the row count. torch's ``F.linear`` goes to MKL, which on the AMD EPYC cores
this project measures on multiplies 5 rows by Qwen2.5-7B's 152,064 × 3,584 head in 491 ms and 1 row in 113 ms;
oneDNN (torch's other CPU library, as torch.compile uses it) takes 165 ms and 81 ms; MKL with the operands the other
way round (``W @ h.T``) is the fastest for 2 to 8 rows of the demo's 256-wide head. No one kernel wins every shape,
and which one wins depends on the CPU, so :class:`TunedHead` times the candidates on the first call of each size
of row count and head shape, and keeps the fastest (as cuDNN's benchmark mode does). The candidates agree to float32
rounding. ``benchmarks/head_layout.py`` measures every width and row count; reports/head-layout.md has the figures.

Timing a size costs a few products (100–500 ms for the demo's 152,064 × 256 head at 16–128 rows, several times the
step it serves), and a cold ``vocabcheck run`` meets a new size at every batch shape: rows leaving the batch, each
verification width. So the choices are kept on disk, ``head-kernels.json`` (:mod:`vocabcheck.decode.measured`),
per machine (processor model, torch version, threads), head shape and dtype: a process times only the sizes no
earlier process on this machine timed. Only a clear win is kept (the winner at least 20 % faster than the runner-up):
where kernels are close, a busy moment could have picked either, and each process times that size again. Delete the
file to time them again. A file that cannot be read or written costs only the timing; a name in it that is not a
candidate here is ignored.

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
    shape. The first call of a bucket times the candidates on its input — ``rounds`` interleaved rounds keeping each
    kernel's best time (the first round doubles as the warm-up; robust to a busy machine), dropping after the first
    round any kernel over twice the fastest — and returns the winner's own product, so it costs a few products;
    later calls cost one. Heads of the same shape share their choices (:data:`_CHOICES`)."""

    rounds = 2

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self.kernels = candidates()
        key = (tuple(weight.shape), weight.dtype)
        if key not in _CHOICES:
            _CHOICES[key] = {bucket: name for bucket, name in stored_choices(key).items() if name in self.kernels}
        self.choice: dict[int, str] = _CHOICES[key]  # bucket → name
        self.key = key

    @staticmethod
    def bucket(rows: int) -> int:
        return rows if rows <= 2 else 1 << (rows - 1).bit_length()

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        bucket = self.bucket(hidden.numel() // hidden.shape[-1])
        name = self.choice.get(bucket)
        if name is not None:
            return self.kernels[name](hidden, self.weight)
        name, out, decisive = self._fastest(hidden)
        self.choice[bucket] = name
        if decisive:
            kept = stored_choices(self.key)
            kept[bucket] = name
            KernelFile.put(head_name(self.key), {str(b): n for b, n in sorted(kept.items())})
        return out

    def _fastest(self, hidden: torch.Tensor) -> tuple[str, torch.Tensor, bool]:
        """The fastest kernel, its product, and whether it won clearly enough to be kept for later processes: by
        ``DECISIVE`` or more over the runner-up (where kernels are close, a busy moment could have picked either,
        and a choice kept on disk would outlive the moment; such a bucket is timed again in each process)."""
        best = {name: float("inf") for name in self.kernels}
        outputs = {}
        for round_ in range(self.rounds):
            for name in list(best):
                start = time.perf_counter()
                outputs[name] = self.kernels[name](hidden, self.weight)
                best[name] = min(best[name], time.perf_counter() - start)
            if round_ == 0:
                fastest = min(best.values())
                best = {name: seconds for name, seconds in best.items() if seconds <= 2 * fastest}
        ranked = sorted(best, key=best.get)
        decisive = len(ranked) == 1 or best[ranked[0]] <= DECISIVE * best[ranked[1]]
        return ranked[0], outputs[ranked[0]], decisive


DECISIVE = 0.8  # a kernel kept on disk was at least this much faster (in time) than the runner-up


KernelFile = MachineStore("head-kernels.json")
"""``{"version": 1, "machines": {machine: {"152064x256 float32": {"16": "onednn"}}}}``: the kernel each earlier
process on a machine timed fastest for each head and bucket."""


def head_name(key: tuple[tuple[int, ...], torch.dtype]) -> str:
    shape, dtype = key
    return "x".join(map(str, shape)) + " " + str(dtype).removeprefix("torch.")


def stored_choices(key) -> dict[int, str]:
    """This machine's kept choices for one head: {bucket: kernel name} (empty where there are none)."""
    found = KernelFile.get(head_name(key))
    if not isinstance(found, dict):
        return {}
    return {int(bucket): name for bucket, name in found.items()
            if isinstance(bucket, str) and bucket.isdigit() and isinstance(name, str)}


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
