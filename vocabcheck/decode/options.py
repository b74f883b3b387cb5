"""What one generate call is asked to do: one frozen object shared by `run`, `bench` and the library call."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BadOption
from .sampling import Sampling

METHODS = ("draft", "ngram", "none")  # every view, schema and command line reads this list
MAX_K = 64
AUTO = "auto"


def parse_k(value: object) -> int | str:
    """``-k`` as the command line gives it: ``auto`` or a whole number from 1 to 64 (one line otherwise)."""
    text = str(value).strip().lower()
    if text == AUTO:
        return AUTO
    try:
        k = int(text)
    except ValueError:
        raise BadOption(f"-k (tokens proposed per step) must be between 1 and {MAX_K} or auto, not {value!r}") \
            from None
    _check_k(k)
    return k


def _check_k(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise BadOption(f"-k (tokens proposed per step) must be between 1 and {MAX_K} or auto, not {k!r}")


@dataclass(frozen=True)
class DecodeOptions:
    """``method``: ``"draft"`` (a draft model proposes), ``"ngram"`` (prompt lookup proposes) or ``"none"`` (plain
    decoding). ``k`` is the proposal length: ``"auto"`` (the default) lets :mod:`vocabcheck.decode.controller` pick,
    every step and for the batch's live rows, 0 to ``k_max`` tokens from the measured costs and acceptance; an
    integer proposes that many every step. Every row stops after ``max_new_tokens`` tokens or at an eos id (unless
    ``ignore_eos``). ``time_phases`` splits the time between draft and target; by default it is on on the CPU and
    off on CUDA, where it would cost a device sync per phase."""

    method: str = "draft"
    k: int | str = AUTO
    max_new_tokens: int = 64
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    ngram_min: int = 1
    ngram_max: int = 3
    ignore_eos: bool = False
    time_phases: bool | None = None
    k_max: int = 8

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise BadOption(f"--method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.k != AUTO:
            _check_k(self.k)
        if isinstance(self.k_max, bool) or not isinstance(self.k_max, int) or not 1 <= self.k_max <= MAX_K:
            raise BadOption(f"the longest automatic proposal (k_max) must be between 1 and {MAX_K}, "
                            f"not {self.k_max!r}")
        if self.max_new_tokens < 1:
            raise BadOption(f"--max-new-tokens must be at least 1, not {self.max_new_tokens}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise BadOption(f"need 1 <= --ngram-min <= --ngram-max, not {self.ngram_min} and {self.ngram_max}")

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    @property
    def adaptive(self) -> bool:
        """Whether the proposal length is chosen step by step (``k="auto"``)."""
        return self.speculative and self.k == AUTO

    @property
    def proposals(self) -> int:
        """The most tokens a step proposes: k (or k_max for ``auto``) for speculative methods, 0 for plain."""
        if not self.speculative:
            return 0
        return self.k_max if self.k == AUTO else self.k

    @property
    def k_label(self) -> int | str:
        """k as reports show it: the integer, ``"auto"``, or 0 for plain decoding."""
        return self.k if self.speculative else 0
