"""Devices and dtypes, and the only ways the decoder moves data between the host and the device.

The step loop reads one small tensor back per step (:func:`device_to_host`: how many proposals each row accepted and
the tokens it emitted) and sends host-made tensors (n-gram proposals, the rows that stay in the batch) without
waiting, from pinned memory (:func:`host_to_device`).
"""

from __future__ import annotations

import time

import torch

from ..errors import VocabcheckError

DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(spec: str):
    spec = spec.strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise VocabcheckError(f"--device {spec}: this torch build sees no CUDA device "
                                  f"(torch {torch.__version__}); use --device cpu or install a CUDA build of torch")
        device = torch.device(spec)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise VocabcheckError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) present")
        return device
    raise VocabcheckError(f"--device must be auto, cpu, cuda or cuda:N, not {spec!r}")


def resolve_dtype(spec: str, device):
    if spec == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if spec not in DTYPES:
        raise VocabcheckError(f"--dtype must be one of {', '.join(DTYPES)}, not {spec!r}")
    return getattr(torch, spec)


def host_to_device(data, device: torch.device, *, shape: tuple[int, ...] | None = None,
                   dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A tensor made on the host, on ``device``; to a CUDA device the copy is asynchronous, from pinned memory.
    ``shape`` gives the shape of an empty ``data`` (``torch.tensor([[], []])`` would lose the second axis)."""
    tensor = torch.tensor(data, dtype=dtype)
    if shape is not None:
        tensor = tensor.reshape(shape)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def device_to_host(tensor: torch.Tensor) -> list:
    """The step's one synchronisation: a small tensor read back as nested lists."""
    return tensor.tolist()


class Clock:
    """Wall-clock phases. On CUDA every reading synchronises the device, so the engine reads it only where asked to
    split the time between draft and target (``time_phases``)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()
