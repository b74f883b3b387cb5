"""The speculation methods and the proposal length: the one place that knows what each method is and needs, and
what ``-k`` may be.

A :class:`Method` is what ``--method`` / ``--methods`` take and what every document names (its value is the string
the JSON carries). Each says whether it proposes tokens at all, whether it needs a draft model, and how the views
name it; what each *builds* is keyed by it where that is built (:data:`vocabcheck.decode.factory.PROPOSERS`,
:data:`vocabcheck.engines.vllm.ENGINE_METHOD`, predict's replays), so a new method is one member here and one entry in
each of those tables.
"""

from __future__ import annotations

from enum import StrEnum

from .errors import BadOption


class Method(StrEnum):
    NONE = "none"  # plain decoding: one token a step, the baseline every speedup is measured against
    NGRAM = "ngram"  # prompt lookup: the continuation of the latest earlier match of the last n tokens
    DRAFT = "draft"  # a draft model proposes; its probabilities mapped onto the target's rows

    @property
    def proposes(self) -> bool:
        """Whether a step verifies proposed tokens (every method but plain decoding)."""
        return self is not Method.NONE

    @property
    def needs_draft(self) -> bool:
        """Whether the method runs a second model (the draft), so the pair must be compared first."""
        return self is Method.DRAFT

    @property
    def label(self) -> str:
        """How tables and reports name it."""
        return _LABELS[self]

    @property
    def help(self) -> str:
        return _HELP[self]

    @classmethod
    def parse(cls, value: object, option: str = "--method") -> "Method":
        """A method from what a user or a document gave (one line naming the choices otherwise)."""
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise BadOption(f"{option} must be one of {', '.join(m.value for m in cls)}, not {value!r}") from None

    @classmethod
    def parse_list(cls, text: str, option: str = "--methods") -> tuple["Method", ...]:
        """A comma-separated list (each once, in the order given)."""
        chosen = tuple(dict.fromkeys(cls.parse(item, option) for item in str(text).split(",") if item.strip()))
        if not chosen:
            raise BadOption(f"{option} needs at least one of {', '.join(m.value for m in cls)}")
        return chosen


_LABELS = {Method.NONE: "no speculation", Method.NGRAM: "n-gram", Method.DRAFT: "draft model"}
_HELP = {Method.NONE: "plain decoding", Method.NGRAM: "prompt lookup", Method.DRAFT: "a draft model"}

SPECULATIVE = tuple(m for m in Method if m.proposes)
"""The methods that propose, in the order tables list them."""


# --- the proposal length ------------------------------------------------------------------------------------------

AUTO = "auto"  # -k auto: the adaptive controller picks 0 to k_max tokens every step
MAX_K = 64  # the largest fixed k any command takes
DEFAULT_K_MAX = 8  # the longest proposal -k auto makes
K_RANGE = f"a whole number from 1 to {MAX_K}"


def parse_k(value: object, flag: str = "-k (tokens proposed per step)") -> int | str:
    """``-k`` as a command line or a document gives it: ``auto`` or a whole number from 1 to :data:`MAX_K` (one line
    naming ``flag`` otherwise)."""
    if isinstance(value, int) and not isinstance(value, bool):
        k = value
    else:
        text = str(value).strip().lower()
        if text == AUTO:
            return AUTO
        try:
            k = int(text)
        except ValueError:
            raise BadOption(f"{flag} must be between 1 and {MAX_K} or auto, not {value!r}") from None
    check_k(k, flag)
    return k


def check_k(k: object, flag: str = "-k (tokens proposed per step)") -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise BadOption(f"{flag} must be between 1 and {MAX_K} or auto, not {k!r}")


def parse_ks(text: str, flag: str = "-k") -> tuple[int | str, ...]:
    """A comma-separated list of k values (bench, predict): each as :func:`parse_k` takes it, each once, in the
    order given."""
    values: list[int | str] = []
    for item in (part.strip() for part in str(text).split(",")):
        if item and (k := parse_k(item, flag)) not in values:
            values.append(k)
    if not values:
        raise BadOption(f"{flag} takes whole numbers from 1 to {MAX_K} or auto, comma-separated; not {text!r}")
    return tuple(values)
