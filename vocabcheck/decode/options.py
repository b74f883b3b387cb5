"""What one generate call is asked to do: one frozen object shared by `run`, `bench` and the library call."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BadOption
from ..methods import AUTO, DEFAULT_K_MAX, MAX_K, Method, check_k as _check_k, parse_k  # noqa: F401  (re-exported)
from .sampling import Sampling


@dataclass(frozen=True)
class DecodeOptions:
    """``method``: a :class:`vocabcheck.methods.Method` (a draft model, prompt lookup, or plain decoding; its string
    is accepted). ``k`` is the proposal length: ``"auto"`` (the default) lets :mod:`vocabcheck.decode.auto.controller` pick,
    every step and for the batch's live rows, 0 to ``k_max`` tokens from the measured costs and acceptance; an
    integer proposes that many every step. Every row stops after ``max_new_tokens`` tokens or at an eos id (unless
    ``ignore_eos``). ``time_phases`` splits the time between draft and target; by default it is on on the CPU and
    off on CUDA, where it would cost a device sync per phase."""

    method: Method = Method.DRAFT
    k: int | str = AUTO
    max_new_tokens: int = 64
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    ngram_min: int = 1
    ngram_max: int = 3
    ignore_eos: bool = False
    time_phases: bool | None = None
    k_max: int = DEFAULT_K_MAX

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", Method.parse(self.method))
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
        return self.method.proposes

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
