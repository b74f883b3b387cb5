"""The fields of a model's config.json (and generation_config.json) that vocabcheck reads, with their types checked
in one place.

Every command sees a config through :func:`read_config`, so that ``compare``, ``inspect``, ``run``, ``gate`` and
``align`` agree on what it says. A field holds a value of the type transformers declares for it, or the model is
refused (:class:`~vocabcheck.errors.InputError`, exit code 2) with one line that names the file and the field: a
value of another type is never ignored, never guessed at, and never left for transformers to refuse later (it checks
the same types when it loads a config, and raises ``StrictDataclassFieldValidationError``).

The types, as JSON:

- ``vocab_size``, ``hidden_size``: an integer, not negative. transformers refuses ``"32000"``, ``32000.0`` and
  ``true`` alike (a whole float too), and so does vocabcheck; a negative size is refused because no model can be built
  with it.
- ``tie_word_embeddings``: ``true`` or ``false`` (not ``"false"``, not ``0``).
- ``bos_token_id``, ``pad_token_id``, ``unk_token_id``: an integer; ``eos_token_id``: an integer or a list of
  integers. A negative id (old Llama configs write ``"pad_token_id": -1``) is accepted and means "no token", as
  transformers reads it (with a warning).
- ``sliding_window``: an integer; ``layer_types``: a list of strings. vocabcheck does not read them, but the decoder's
  KV cache does, through transformers.
- ``model_type``: a string; ``architectures``: a list of strings.
- ``text_config``: an object. Multimodal configs keep the text model's fields there: a field that is missing or
  ``null`` at the top level is read from it, and its fields are checked the same way.

``null`` means "not given" for every field (which fields a model class requires is for transformers to say when
`run` loads it). ``torch_dtype`` / ``dtype`` are not read: vocabcheck never uses them, and transformers ignores them
when it is given a dtype, as `run` always does. Other fields are transformers' business alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InputError

ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")


@dataclass(frozen=True)
class ModelConfig:
    """What config.json says, in the types vocabcheck reads; ``None`` where a field is not given."""

    vocab_size: int | None = None
    hidden_size: int | None = None
    tie_word_embeddings: bool | None = None
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    unk_token_id: int | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    model_type: str | None = None
    architectures: tuple[str, ...] | None = None

    @property
    def architecture(self) -> str | None:
        """The first listed architecture (``Qwen2ForCausalLM``), else the model type (``qwen2``)."""
        return self.architectures[0] if self.architectures else self.model_type

    def token_id(self, role: str) -> int | None:
        """The id config.json gives a special-token role (``bos``, ``eos``, ``pad``, ``unk``): one id, not negative."""
        value = getattr(self, f"{role}_token_id")
        return value if type(value) is int and value >= 0 else None

    def eos_ids(self) -> tuple[int, ...]:
        return _ids(self.eos_token_id)


def read_config(config: Mapping[str, Any] | None, where: str) -> ModelConfig:
    """The typed view of a parsed config.json; ``where`` names the file in errors."""
    if config is None:
        return ModelConfig()
    if not isinstance(config, Mapping):
        raise InputError(f"must hold a JSON object, found {_describe(config)}", where)
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise InputError(f"text_config must be an object, found {_describe(text)}", where)
    top = _Fields(config, "", where)
    sub = _Fields(text or {}, "text_config.", where)
    for section in (top, sub):  # every field vocabcheck reads is checked where it is given, read or not
        for name, check in _CHECKS.items():
            section.get(name, check)

    def either(name: str) -> Any:
        value = top.get(name, _CHECKS[name])
        return value if value is not None else sub.get(name, _CHECKS[name])

    return ModelConfig(
        vocab_size=either("vocab_size"),
        hidden_size=either("hidden_size"),
        tie_word_embeddings=either("tie_word_embeddings"),
        bos_token_id=either("bos_token_id"),
        eos_token_id=either("eos_token_id"),
        pad_token_id=either("pad_token_id"),
        unk_token_id=either("unk_token_id"),
        sliding_window=either("sliding_window"),
        layer_types=either("layer_types"),
        model_type=top.get("model_type", _CHECKS["model_type"]),
        architectures=top.get("architectures", _CHECKS["architectures"]),
    )


def read_generation_eos(generation_config: Mapping[str, Any] | None, where: str) -> tuple[int, ...] | None:
    """The eos ids of generation_config.json (``None`` when it gives none), checked as config.json's are."""
    if not generation_config or "eos_token_id" not in generation_config:
        return None
    return _ids(_Fields(generation_config, "", where).get("eos_token_id", _id_or_ids))


# --- the checks -------------------------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, expected: str, item: Any = None, position: int | None = None):
        self.expected, self.item, self.position = expected, item, position


def _size(value: Any) -> int:
    if type(value) is not int:
        raise _Refused("an integer")
    if value < 0:
        raise _Refused("a non-negative integer")
    return value


def _integer(value: Any) -> int:
    if type(value) is not int:
        raise _Refused("an integer")
    return value


def _boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise _Refused("true or false")
    return value


def _string(value: Any) -> str:
    if type(value) is not str:
        raise _Refused("a string")
    return value


def _list_of(kind: type, expected: str) -> Callable[[Any], tuple]:
    def check(value: Any) -> tuple:
        if type(value) is not list:
            raise _Refused(expected)
        for position, item in enumerate(value):
            if type(item) is not kind:
                raise _Refused(expected, item, position)
        return tuple(value)
    return check


_strings = _list_of(str, "a list of strings")
_integers = _list_of(int, "an integer or a list of integers")


def _id_or_ids(value: Any) -> int | tuple[int, ...]:
    return value if type(value) is int else _integers(value)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "vocab_size": _size,
    "hidden_size": _size,
    "tie_word_embeddings": _boolean,
    "bos_token_id": _integer,
    "eos_token_id": _id_or_ids,
    "pad_token_id": _integer,
    "unk_token_id": _integer,
    "sliding_window": _integer,
    "layer_types": _strings,
    "model_type": _string,
    "architectures": _strings,
}


@dataclass(frozen=True)
class _Fields:
    values: Mapping[str, Any]
    prefix: str
    where: str

    def get(self, name: str, check: Callable[[Any], Any]) -> Any:
        value = self.values.get(name)
        if value is None:
            return None
        try:
            return check(value)
        except _Refused as refused:
            found = (_describe(value) if refused.position is None else
                     f"a list whose item {refused.position} is {_describe(refused.item)}")
            raise InputError(f"{self.prefix}{name} must be {refused.expected}, found {found}", self.where) from None


def _ids(value: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """Distinct non-negative ids, in order."""
    if value is None:
        return ()
    values = (value,) if type(value) is int else value
    return tuple(dict.fromkeys(v for v in values if v >= 0))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {_clip(repr(value))}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, int):
        return f"the integer {_clip(str(value))}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
