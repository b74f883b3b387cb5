"""What one generate call is asked to do: one frozen object shared by `run`, `bench` and the library call."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BadOption
from .sampling import Sampling

METHODS = ("draft", "ngram", "none")
MAX_K = 64


@dataclass(frozen=True)
class DecodeOptions:
    """``method``: ``"draft"`` (a draft model proposes), ``"ngram"`` (prompt lookup proposes) or ``"none"`` (plain
    decoding). ``k`` tokens are proposed per step; every row stops after ``max_new_tokens`` tokens or at an eos id
    (unless ``ignore_eos``). ``time_phases`` splits the time between draft and target; by default it is on on the CPU
    and off on CUDA, where it would cost a device sync per phase."""

    method: str = "draft"
    k: int = 4
    max_new_tokens: int = 64
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    ngram_min: int = 1
    ngram_max: int = 3
    ignore_eos: bool = False
    time_phases: bool | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise BadOption(f"--method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.speculative and not 1 <= self.k <= MAX_K:
            raise BadOption(f"-k (tokens proposed per step) must be between 1 and {MAX_K}, not {self.k}")
        if self.max_new_tokens < 1:
            raise BadOption(f"--max-new-tokens must be at least 1, not {self.max_new_tokens}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise BadOption(f"need 1 <= --ngram-min <= --ngram-max, not {self.ngram_min} and {self.ngram_max}")

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    @property
    def proposals(self) -> int:
        """Tokens proposed per step: k for speculative methods, 0 for plain decoding."""
        return self.k if self.speculative else 0

