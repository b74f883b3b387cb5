"""What a source hands to the profile: the raw facts about one model and where each one came from."""

from __future__ import annotations

import itertools
import json
import math
import operator
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import InputError, SourceNotFound, VocabcheckError, library_failure, panic_output_dropped
from ..limits import cap_from_env

# Size caps, checked before a file is read into memory. Real tokenizer.json files reach ~35 MB (Gemma 3), real
# tokenizer_config.json files a few MB (256k added_tokens_decoder entries).
MAX_TOKENIZER_JSON_BYTES = 256 * 1024 * 1024
MAX_CONFIG_JSON_BYTES = 32 * 1024 * 1024
MAX_INDEX_JSON_BYTES = 32 * 1024 * 1024
MAX_CHAT_TEMPLATE_BYTES = 4 * 1024 * 1024

# Entries (array items and object members) a tokenizer.json may hold, counted before it is parsed: a vocabulary token
# is one entry, a merge written as a pair three (the pair and its two strings), a Unigram piece three. Parsing and
# profiling cost about 400 bytes per entry, and comparing two different tokenizers builds both for the probe: a pair of
# 3,000,000-entry files peaks at about 2.2 GB (a 10-million-token vocabulary, 188 MB, took 5.7 GB and 153 s). Real
# files hold up to about 1.9 million (Gemma 3: 262,144 tokens and 514,906 merges written as pairs).
MAX_TOKENIZER_ENTRIES = 3_000_000
TOKENIZER_ENTRIES_ENV = "VOCABCHECK_MAX_TOKENIZER_ENTRIES"


@dataclass(frozen=True)
class TensorShape:
    """One tensor as a checkpoint header describes it; no weights are read."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    file: str


@dataclass(frozen=True)
class ModelSource:
    """The raw materials of one model, as read from a directory, a file, the hub or a GGUF file.

    ``tokenizer_json`` is the tokenizer in the `tokenizers` JSON format: the file as read when the model ships one, or
    the result of a conversion (SentencePiece, tiktoken, Tekken, GGUF) through the libraries that do it.
    ``tensors`` is ``None`` when the source has no checkpoint (a bare tokenizer file): row counts are then unknown.
    ``provenance`` maps each fact (``tokenizer``, ``tokenizer_config``, ``config``, ``generation_config``,
    ``chat_template``, ``tensors``) to the file or hub revision it came from.
    """

    spec: str
    kind: str
    location: str
    tokenizer_json: str
    tokenizer_config: Mapping[str, Any] = field(default_factory=dict)
    special_tokens_map: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] | None = None
    generation_config: Mapping[str, Any] | None = None
    chat_template: str | None = None
    tensors: Mapping[str, TensorShape] | None = None
    provenance: Mapping[str, str] = field(default_factory=dict)
    revision: str | None = None
    weights: tuple[str, ...] = ()

    @property
    def tokenizer_where(self) -> str:
        """The file (or hub revision) the tokenizer came from, as errors about it name it."""
        return self.provenance.get("tokenizer", self.location)

    @cached_property
    def tokenizer(self):
        """The `tokenizers.Tokenizer`, loaded on first use (building BPE tables costs ~0.3 s for a 150k vocab).

        A file the library loads can still fail when it encodes (an unk token missing from the vocabulary, a
        pre-tokenizer regex that exhausts its backtracking limit, a Rust panic): the tokenizer encodes and decodes
        the probe corpus here, so that such a file is refused as bad input instead of failing later.
        """
        from tokenizers import Tokenizer

        from ..probe import SMOKE_TEXTS, EncodingTooLarge, bounded_encodings

        where = self.tokenizer_where
        try:
            with panic_output_dropped():
                tokenizer = Tokenizer.from_str(self.tokenizer_json)
        except BaseException as exc:  # tokenizers raises a bare Exception with a Rust message, or panics
            if not library_failure(exc):
                raise
            raise InputError(f"the tokenizers library cannot load this tokenizer: {_first_line(exc)[:300]}",
                             where) from exc
        # padding and truncation are serving settings, not what ids mean: the probe and the prompts encode without
        tokenizer.no_padding()
        tokenizer.no_truncation()
        try:
            with panic_output_dropped():
                for encoding in bounded_encodings(tokenizer, SMOKE_TEXTS, add_special_tokens=True):
                    tokenizer.decode(encoding.ids, skip_special_tokens=True)
        except EncodingTooLarge as exc:
            raise InputError(exc.problem, where) from exc
        except BaseException as exc:
            if not library_failure(exc):
                raise
            raise InputError(f"the tokenizers library loads this tokenizer but cannot encode text with it: "
                             f"{_first_line(exc)[:200]}", where) from exc
        return tokenizer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def read_capped(path: Path, limit: int, what: str) -> bytes:
    """Read a whole file after checking its size against ``limit``."""
    try:
        status = path.stat()
    except FileNotFoundError as exc:
        raise SourceNotFound(f"{what} not found", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", path) from exc
    if stat.S_ISDIR(status.st_mode):
        raise InputError(f"expected {what} but found a directory", path)
    if not stat.S_ISREG(status.st_mode):  # a FIFO or a device: opening or reading it could block forever
        raise InputError(f"expected {what} but found something that is not a regular file", path)
    size = status.st_size
    if size > limit:
        raise InputError(f"{what} is {size:,} bytes, over the {limit:,}-byte limit", path)
    try:
        with open(path, "rb") as handle:
            # read what stat saw (asking for limit + 1 bytes would allocate the whole limit for a small file); one
            # byte more shows that the file grew since, and then reading goes on up to the limit
            data = handle.read(min(size, limit) + 1)
            if len(data) > size:
                data += handle.read(limit + 1 - len(data))
    except IsADirectoryError as exc:
        raise InputError(f"expected {what} but found a directory", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", path) from exc
    if len(data) > limit:
        raise InputError(f"{what} grew past the {limit:,}-byte limit while it was read", path)
    return data


# a UTF-16 surrogate written as an escape (\ud800) or as raw bytes (CESU-8): a string that may not be text
_SURROGATE_TEXT = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\xed[\xa0-\xbf]")


class _NotAJsonNumber(ValueError):
    """A number JSON cannot hold: ``NaN``, ``Infinity``, ``-Infinity``, or a literal beyond a 64-bit float."""


def _refuse_constant(name: str) -> float:
    raise _NotAJsonNumber(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotAJsonNumber(f"the number {text[:40]} is beyond what a 64-bit float holds")
    return value


def parse_json(data: bytes | str, where: str | Path, what: str, *, strict_numbers: bool = False) -> Any:
    """Parse a JSON text; every way it can fail is an :class:`InputError` naming ``where``.

    Strings must be Unicode text: an unpaired surrogate (``"\\udc80"``, which Python's parser accepts and the
    `tokenizers` library refuses) cannot be printed or written as UTF-8, so it is refused here.

    Python's parser also reads ``NaN``, ``Infinity`` and ``-Infinity``, which JSON does not have, and turns ``1e400``
    into an infinity. transformers reads config files with Python's parser, so they keep that leniency; the `tokenizers`
    library (serde_json) refuses all four anywhere in a tokenizer.json, so ``strict_numbers`` refuses them too.
    """
    hooks: dict[str, Any] = {"parse_constant": _refuse_constant, "parse_float": _finite_float} if strict_numbers \
        else {}
    try:
        value = json.loads(data, **hooks)
    except _NotAJsonNumber as exc:
        raise InputError(f"{what} is not valid JSON ({exc}; the tokenizers library refuses it)", where) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text", where) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                         where) from exc
    except RecursionError as exc:
        raise InputError(f"{what} is nested too deeply to read", where) from exc
    except ValueError as exc:  # Python reads integers of at most 4,300 digits (sys.get_int_max_str_digits)
        detail = (f"a number of more than {sys.get_int_max_str_digits():,} digits" if "digits" in str(exc)
                  else _first_line(exc)[:200])
        raise InputError(f"{what} is not valid JSON ({detail})", where) from exc
    pattern = _SURROGATE_TEXT if isinstance(data, str) else _SURROGATE_BYTES
    if pattern.search(data):  # rare (escaped emoji are surrogate pairs): only then look at every string
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(f"{what} holds a string that is not Unicode text (an unpaired surrogate, "
                             f"U+{ord(exc.object[exc.start]):04X})", where) from exc
        except RecursionError as exc:
            raise InputError(f"{what} is nested too deeply to read", where) from exc
    return value


def max_tokenizer_entries() -> int:
    """The entry limit of a tokenizer.json: :data:`MAX_TOKENIZER_ENTRIES`, or ``VOCABCHECK_MAX_TOKENIZER_ENTRIES``."""
    return cap_from_env(TOKENIZER_ENTRIES_ENV, MAX_TOKENIZER_ENTRIES, "entries")


def check_entries(text: str, where: str | Path, what: str, limit: int) -> None:
    """Refuse a JSON text of more than ``limit`` entries (array items and object members) before it is parsed.

    Every entry follows an opening bracket or a comma, so counting those characters bounds the entries from above
    without allocating anything (~0.3 s for 188 MB); only a text over the limit by that count is counted exactly, by
    the regular expression engine skipping strings, and only until the count passes the limit (about a second per
    million entries, and no memory).
    """
    bound = text.count(",") + text.count("[") + text.count("{")
    if bound <= limit or count_entries(text, above=limit) <= limit:
        return
    raise InputError(f"{what} holds more than {limit:,} entries (tokens, merges, ids...; at most {bound:,}), the "
                     f"limit that keeps a comparison within a few GB of memory; {TOKENIZER_ENTRIES_ENV} raises it",
                     where)


def count_entries(text: str, *, above: int | None = None) -> int:
    """The array items and object members of a JSON text: its commas and the brackets that open a non-empty array or
    object, outside strings. Exact for valid JSON; off by one at most for a text that ends inside a value. With
    ``above``, the count stops once it passes ``above`` and says ``above + 1``."""
    # each match runs up to one such character, or to the end; the text's tail makes one more match, and the empty
    # string at its very end another (one if the text ends on such a character)
    found = _UP_TO_AN_ENTRY.finditer(text)  # counted in C, each match dropped at once: nothing accumulates
    matches = sum(map(operator.truth, found if above is None else itertools.islice(found, above + 3)))
    return max(matches - 2, 0)


# Possessive throughout, so that no input makes the engine backtrack: runs of other characters, whole strings (an
# unterminated one runs to the end), openers of empty arrays and objects; then a comma or an opener, or the end.
_UP_TO_AN_ENTRY = re.compile(r'''(?:[^",\[{]++|"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)|[\[{](?=\s*+[\]}]))*+'''
                             r"(?:[,\[{]|\Z)", re.DOTALL)


def read_json_object(path: Path, limit: int, what: str) -> dict[str, Any]:
    value = parse_json(read_capped(path, limit, what), path, what)
    if not isinstance(value, dict):
        raise InputError(f"{what} must hold a JSON object, found {type(value).__name__}", path)
    return value


def inside(directory: Path, name: str, what: str, where: Path) -> Path:
    """Resolve ``name`` relative to ``directory`` and refuse anything that leaves it (``../``, absolute paths)."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InputError(f"{what} names an invalid file: {name!r}", where)
    candidate = Path(name)
    # A lexical check: files in the Hugging Face cache are symbolic links into ../../blobs, which is fine; a name
    # that climbs out of the directory or is absolute is not.
    if candidate.is_absolute() or ".." in candidate.parts or candidate.drive:
        raise InputError(f"{what} points outside the model directory: {name!r}", where)
    return directory / candidate


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
