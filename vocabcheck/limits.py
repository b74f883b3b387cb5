"""Caps on what reading a hostile file may cost, the environment variables that set them, and the symbolic bounds a
tokenizer's normalizer and decoder are checked against before the tokenizers library runs them
(docs/hostile-input.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import InputError, VocabcheckError

# How long a normalizer may make a probe text, and a decoder one token: a Replace of one character by a thousand,
# ten times over, would otherwise make the library build 10³⁰ characters.
MAX_TOKEN_BYTES = 65_536
TOKEN_BYTES_ENV = "VOCABCHECK_MAX_TOKEN_BYTES"
MAX_NORMALIZED_CHARS = 65_536
NORMALIZED_CHARS_ENV = "VOCABCHECK_MAX_NORMALIZED_CHARS"
LONGEST_PROBE_TEXT = 128  # characters; the probe's texts are shorter

# Prompt files (run, bench, predict): checked before anything is tokenised.
MAX_PROMPT_FILE_BYTES = 64 << 20
PROMPT_FILE_BYTES_ENV = "VOCABCHECK_MAX_PROMPT_FILE_BYTES"
MAX_PROMPTS = 100_000
PROMPTS_ENV = "VOCABCHECK_MAX_PROMPTS"
MAX_PROMPT_CHARS = 1 << 20  # one prompt (or response, or chat message), in characters
PROMPT_CHARS_ENV = "VOCABCHECK_MAX_PROMPT_CHARS"
MAX_JSONL_DEPTH = 32  # nesting of one JSONL prompt line (a chat message list is 3 deep)


def cap_from_env(name: str, default: int, unit: str) -> int:
    """A limit: ``default``, or the positive whole number the environment variable ``name`` holds (``_`` and ``,``
    may group its digits); anything else there is one line, exit code 2."""
    value = os.environ.get(name, "").strip().replace("_", "").replace(",", "")
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise VocabcheckError(f"{name} must be a positive whole number of {unit}, not {os.environ[name]!r}"[:200])
    return int(value)


def max_token_bytes() -> int:
    return cap_from_env(TOKEN_BYTES_ENV, MAX_TOKEN_BYTES, "bytes")


def check_pipeline_growth(document: Mapping[str, Any], longest_token: int, where: str) -> None:
    """Refuse a normalizer that could make a probe text longer than ``VOCABCHECK_MAX_NORMALIZED_CHARS`` or a decoder
    that could make one token longer than ``VOCABCHECK_MAX_TOKEN_BYTES``, from the steps alone: a Replace multiplies
    the length by at most (its content's length / its pattern's length), a regular expression's content can land
    between every two characters, a Prepend adds its length. Read from the file as written, before the library
    loads it; a step the library would refuse counts as nothing (the library refuses it next)."""
    normalized = _bound(document.get("normalizer"), LONGEST_PROBE_TEXT, "normalizers")
    cap = cap_from_env(NORMALIZED_CHARS_ENV, MAX_NORMALIZED_CHARS, "characters")
    if normalized > cap:
        raise InputError(f"the normalizer could make a {LONGEST_PROBE_TEXT}-character text {_size(normalized)} "
                         f"characters long, more than {cap:,}; {NORMALIZED_CHARS_ENV} sets another limit", where)
    decoded = _bound(document.get("decoder"), max(longest_token, 1), "decoders")
    cap = max_token_bytes()
    if decoded > cap:
        raise InputError(f"the decoder could make a {max(longest_token, 1):,}-character token {_size(decoded)} "
                         f"characters long, more than {cap:,}; {TOKEN_BYTES_ENV} sets another limit", where)


def _size(length: int) -> str:
    return f"{length:,}" if length < 10**15 else f"about 10^{len(str(length)) - 1}"


def _bound(component: Any, length: int, key: str) -> int:
    """An upper bound of the length ``component`` makes of a text of ``length`` characters (stops growing past 10³⁰
    so that a bound of ten thousand steps stays a small number)."""
    for step in _steps(component, key):
        if length > 10**30:
            break
        kind = step.get("type")
        if kind == "Replace":
            content, pattern = step.get("content"), step.get("pattern")
            if isinstance(content, str) and isinstance(pattern, Mapping):
                if isinstance(pattern.get("String"), str) and pattern["String"]:
                    length = length * max(1, -(-len(content) // len(pattern["String"])))
                else:  # a regular expression, or an empty pattern: the content may land between every two characters
                    length = length + (length + 1) * len(content)
        elif kind == "Prepend" and isinstance(step.get("prepend"), str):
            length += len(step["prepend"])
        elif kind == "BPEDecoder" and step.get("suffix", "</w>") == "":
            length = 2 * length + 1  # an empty suffix becomes a space between every two characters

    return length


def _steps(component: Any, key: str, depth: int = 0) -> Iterator[Mapping[str, Any]]:
    if not isinstance(component, Mapping) or depth > 200:
        return
    if component.get("type") == "Sequence" and isinstance(component.get(key), list):
        for part in component[key]:
            yield from _steps(part, key, depth + 1)
    else:
        yield component
