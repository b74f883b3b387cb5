"""A tokenizer as data: its `tokenizers` JSON read, validated and fingerprinted.

The tokenizer is read from its `tokenizers` JSON as data. The pipeline components (normalizer, pre-tokenizer,
post-processor, decoder) are loaded by the `tokenizers` library itself, on a stand-in model, which validates them and
fills in their defaults so that two files written by different library versions compare equal when they mean the same
thing; the same stand-in tells which special tokens the post-processor adds around a sequence. Building the real BPE
tables (~0.3 s for a 150k vocabulary) is left to the moment an encoding is needed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
import re
from collections import ChainMap, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import InputError, library_failure, panic_output_dropped
from .limits import check_pipeline_growth

PIPELINE = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "BPE": {"dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": False},
    "Unigram": {"unk_id": None, "byte_fallback": False},
    "WordPiece": {"unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100},
    "WordLevel": {"unk_token": None},
}

# Placeholder tokens: ids a tokenizer reserves without giving them a meaning yet.
PLACEHOLDER = re.compile(
    r"""^(?:
      \[control_\d+\]                                  # Mistral SentencePiece v3+
    | <\|reserved_special_token_\d+\|>                 # Llama 3
    | <\|reserved_\d+\|> | <reserved_\d+> | <\|reserved\d+\|>
    | <unused_?\d+> | \[unused\d+\] | <\|unused_?\d+\|>   # Gemma, BERT
    | <\|extra_\d+\|> | <extra_id_\d+>                 # Qwen (tiktoken), T5
    | <SPECIAL_\d+>                                    # Mistral Tekken fillers
    | <\|place▁holder▁no▁\d+\|>                        # DeepSeek
    | <\|dummy_\d+\|> | <dummy_\d+>
    | <pad_\d+> | \[PAD\d+\]
    )$""",
    re.VERBOSE,
)


def is_placeholder(token: str | None) -> bool:
    return token is not None and PLACEHOLDER.match(token) is not None


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool
    normalized: bool
    lstrip: bool
    rstrip: bool
    single_word: bool

    def flags(self) -> dict[str, bool]:
        return {"special": self.special, "normalized": self.normalized, "lstrip": self.lstrip,
                "rstrip": self.rstrip, "single_word": self.single_word}


@dataclass(frozen=True, eq=False)
class TokenizerProfile:
    """A tokenizer as data. ``tokens[i]`` is the string of id ``i`` (regular or added), ``None`` for an unused id."""

    model_type: str
    model_params: Mapping[str, Any]
    tokens: tuple[str | None, ...]
    regular_count: int
    added: tuple[AddedToken, ...]
    merges: tuple[Sequence[str], ...] | None  # pairs (lists or tuples of two strings), in priority order
    scores: tuple[float, ...] | None
    pipeline: Mapping[str, Any]
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    parts: Mapping[str, str]
    fingerprint: str
    regular_ids: Mapping[str, int] = field(repr=False, default_factory=dict)  # the model vocabulary, string to id

    @property
    def size(self) -> int:
        """One past the largest id the tokenizer can emit."""
        return len(self.tokens)

    @cached_property
    def ids(self) -> Mapping[str, int]:
        """String to id; an added token wins over a regular token of the same string. A view over the vocabulary
        the file already maps (building a 150k-entry dict costs ~0.1 s)."""
        return ChainMap({added.content: added.id for added in self.added}, self.regular_ids)

    @cached_property
    def assigned(self) -> int:
        return len(self.tokens) - self.tokens.count(None)

    def token(self, token_id: int | None) -> str | None:
        if token_id is None or not 0 <= token_id < len(self.tokens):
            return None
        return self.tokens[token_id]


# --- tokenizer --------------------------------------------------------------------------------------------------

_RECENT: OrderedDict[str, TokenizerProfile] = OrderedDict()
_RECENT_SIZE = 4


def tokenizer_profile(text: str, where: str, *, merges_checked_elsewhere: bool = False) -> TokenizerProfile:
    """Profile a tokenizer JSON text. Byte-identical texts (a model family sharing one tokenizer.json) are profiled
    once per process: the last few profiles are kept by the SHA-256 of the text. A text of more entries than
    :func:`~vocabcheck.sources.base.max_tokenizer_entries` is refused before anything is parsed.

    ``merges_checked_elsewhere``: the caller has the tokenizers library build this text (which refuses bad merges)
    and calls :func:`check_merges` itself where that fails; such a profile is not kept for later calls."""
    from .sources.base import check_entries, max_tokenizer_entries

    check_entries(text, where, "tokenizer.json", max_tokenizer_entries())
    key = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    if key in _RECENT:
        _RECENT.move_to_end(key)
        return _RECENT[key]
    profile = profile_tokenizer(_tokenizer_document(text, where), where, check=not merges_checked_elsewhere)
    if merges_checked_elsewhere:
        return profile
    _RECENT[key] = profile
    while len(_RECENT) > _RECENT_SIZE:
        _RECENT.popitem(last=False)
    return profile


def _tokenizer_document(text: str, where: str) -> dict[str, Any]:
    from .sources.base import parse_json

    document = parse_json(text, where, "tokenizer.json", strict_numbers=True)
    if not isinstance(document, dict) or not isinstance(document.get("model"), dict):
        raise InputError("not a tokenizers JSON file: no 'model' object", where)
    return document


def profile_tokenizer(document: Mapping[str, Any], where: str, *, check: bool = True) -> TokenizerProfile:
    """The profile of a parsed tokenizer document; ``check=False`` leaves out :func:`check_merges`."""
    model = document["model"]
    model_type = model.get("type") or _infer_model_type(model)
    if not isinstance(model_type, str) or model_type not in MODEL_DEFAULTS:
        raise InputError(f"unsupported tokenizer model type {repr(model_type)[:100]}", where)
    params = dict(MODEL_DEFAULTS[model_type])
    params.update({k: v for k, v in model.items() if k in MODEL_DEFAULTS[model_type]})
    if model_type == "BPE":  # tokenizers treats an empty prefix/suffix as none; transformers' builders write ""
        for key in ("continuing_subword_prefix", "end_of_word_suffix"):
            if params[key] == "":
                params[key] = None

    scores: tuple[float, ...] | None = None
    merges: tuple[Sequence[str], ...] | None = None
    vocab = model.get("vocab")
    if model_type == "Unigram":
        if not isinstance(vocab, list) or not all(
                isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and type(e[1]) in (int, float)
                for e in vocab):
            raise InputError("Unigram vocab must be a list of [piece, score] pairs", where)
        if not all(type(e[1]) is float or -1e308 < e[1] < 1e308 for e in vocab):  # float() of a huge integer fails
            raise InputError("Unigram scores must be numbers a float can hold", where)
        tokens: list[str | None] = [entry[0] for entry in vocab]
        scores = tuple(float(entry[1]) for entry in vocab)
        if not all(map(math.isfinite, scores)):  # a document built in Python (JSON text cannot say NaN: parse_json)
            bad = next(i for i, score in enumerate(scores) if not math.isfinite(score))
            raise InputError(f"Unigram piece {bad} {tokens[bad]!r} has the score {scores[bad]}; the tokenizers "
                             "library needs finite scores", where)
        regular_ids: Mapping[str, int] = {piece: i for i, piece in enumerate(tokens)}
    else:
        if not isinstance(vocab, dict):
            raise InputError(f"{model_type} vocab must be an object mapping tokens to ids", where)
        tokens = _tokens_by_id(vocab, where)
        regular_ids = vocab
        if model_type == "BPE":
            merges = _merges(model.get("merges", []), where)
            prefix = params["continuing_subword_prefix"]
            if prefix is not None and not isinstance(prefix, str):
                raise InputError(f"continuing_subword_prefix must be a string, found {prefix!r}"[:200], where)
            if check:
                _check_merges(merges, vocab, prefix, where)
    _check_model(model_type, params, len(tokens), where)
    regular_count = len(tokens) - tokens.count(None)

    added = _added_tokens(document.get("added_tokens") or [], where)
    for token in added:
        if token.id >= len(tokens):
            tokens.extend([None] * (token.id + 1 - len(tokens)))
        tokens[token.id] = token.content

    check_pipeline_growth(document, max(map(len, filter(None, tokens)), default=0), where)  # before the library
    pipeline, prefix_ids, suffix_ids = _canonical_pipeline(document, where)
    parts = {
        "model": _digest(json.dumps({"type": model_type, **params}, sort_keys=True)),
        "vocab": _digest_strings(tokens),
        "merges": _digest_strings(map("\x00".join, merges)) if merges is not None else "",
        "scores": _digest(json.dumps(scores)) if scores is not None else "",
        "added_tokens": _digest(json.dumps([[t.id, t.content, t.flags()] for t in added], sort_keys=True,
                                           ensure_ascii=False)),
    }
    parts.update({name: _digest(json.dumps(pipeline[name], sort_keys=True, ensure_ascii=False))
                  for name in PIPELINE})
    fingerprint = _digest(json.dumps(parts, sort_keys=True))
    return TokenizerProfile(
        model_type=model_type,
        model_params=params,
        tokens=tuple(tokens),
        regular_count=regular_count,
        added=added,
        merges=merges,
        scores=scores,
        pipeline=pipeline,
        prefix_ids=prefix_ids,
        suffix_ids=suffix_ids,
        parts=parts,
        fingerprint=fingerprint,
        regular_ids=regular_ids,
    )


def _infer_model_type(model: Mapping[str, Any]) -> str | None:
    # tokenizers accepts files without "type" and guesses from the fields present
    if "merges" in model:
        return "BPE"
    if isinstance(model.get("vocab"), list):
        return "Unigram"
    if "max_input_chars_per_word" in model:
        return "WordPiece"
    return "WordLevel" if "vocab" in model else None


def _tokens_by_id(vocab: Mapping[str, Any], where: str) -> list[str | None]:
    if not vocab:
        return []
    ids = vocab.values()
    if not set(map(type, ids)) <= {int} or min(ids) < 0:
        raise InputError("vocab ids must be non-negative integers", where)
    top = max(ids)
    if top >= 16 * (len(vocab) + 1024):
        raise InputError(f"vocab is sparse beyond reason: {len(vocab):,} tokens but an id of {top:,}", where)
    tokens: list[str | None] = [None] * (top + 1)
    for token, i in vocab.items():
        tokens[i] = token
    if len(vocab) != (top + 1) - tokens.count(None):
        seen: dict[int, str] = {}
        for token, i in vocab.items():
            if i in seen:
                raise InputError(f"vocab gives id {i} to two tokens: {seen[i]!r} and {token!r}", where)
            seen[i] = token
    return tokens


def _merges(raw: Any, where: str) -> tuple[tuple[str, str] | list[str], ...]:
    """The merges as pairs, in priority order; both serialisations (``"a b"`` and ``["a", "b"]``) are accepted.

    Validation is by whole-list checks (a Python-level check per merge costs ~0.25 s on 150k merges).
    """
    if not isinstance(raw, list):
        raise InputError("BPE merges must be a list", where)
    kinds = set(map(type, raw))
    if kinds <= {str}:
        pairs = [merge.split(" ") for merge in raw]  # exactly one space, as the tokenizers library reads them
    elif kinds <= {list}:
        pairs = raw
    else:
        raise InputError("BPE merges must all be strings 'a b' or all be pairs ['a', 'b']", where)
    if pairs and set(map(len, pairs)) != {2}:
        bad = next(number for number, pair in enumerate(pairs) if len(pair) != 2)
        raise InputError(f"BPE merge {bad} is not a pair of tokens: {raw[bad]!r}"[:300], where)
    if kinds <= {list} and not set(map(type, itertools.chain.from_iterable(pairs))) <= {str}:
        raise InputError("BPE merges must pair strings", where)
    return tuple(pairs)


def check_merges(profile: TokenizerProfile, where: str) -> None:
    """Refuse a BPE profile whose merges the tokenizers library cannot build (see :func:`_check_merges`)."""
    if profile.merges is not None:
        _check_merges(profile.merges, profile.regular_ids, profile.model_params["continuing_subword_prefix"], where)


def _check_merges(merges: Sequence[Sequence[str]], vocab: Mapping[str, int], prefix: str | None, where: str) -> None:
    """Every merge joins two tokens of the vocabulary into a third one, as the tokenizers library requires when it
    builds the model (it refuses the file otherwise, or panics): checked here, so that such a file is refused by every
    command, whether or not the probe builds the tokenizer. With a ``continuing_subword_prefix`` the library drops
    that many bytes from the second token before it joins the two.

    By whole-list checks on the usual path (~50 ms for Qwen2.5's 151k merges).
    """
    if prefix is None:
        contains = vocab.__contains__
        if all(map(contains, itertools.chain.from_iterable(merges))) \
                and all(map(contains, itertools.starmap(operator.add, merges))):
            return
    width = len(prefix.encode("utf-8", errors="surrogatepass")) if prefix else 0
    for rank, (first, second) in enumerate(merges):
        merge = f"BPE merge {rank} ({_clip(first)} {_clip(second)})"
        for token in (first, second):
            if token not in vocab:
                raise InputError(f"{_CANNOT_LOAD}: {merge} names {_clip(token)}, which is not in the vocabulary", where)
        tail = second
        if width:
            raw = second.encode("utf-8", errors="surrogatepass")
            try:
                tail = raw[width:].decode("utf-8") if len(raw) >= width else None
            except UnicodeDecodeError:
                tail = None
            if tail is None:  # the library panics slicing the token
                raise InputError(f"{_CANNOT_LOAD}: {merge}: the second token does not begin with {width} whole "
                                 f"bytes to drop for the continuing_subword_prefix {_clip(prefix)}", where)
        if first + tail not in vocab:
            raise InputError(f"{_CANNOT_LOAD}: {merge} makes {_clip(first + tail)}, which is not in the vocabulary",
                             where)


_CANNOT_LOAD = "the tokenizers library cannot load this tokenizer"


def _clip(token: str, limit: int = 40) -> str:
    text = repr(token)
    return text if len(text) <= limit else text[: limit - 2] + "…'"


def _added_tokens(raw: Any, where: str) -> tuple[AddedToken, ...]:
    if not isinstance(raw, list):
        raise InputError("added_tokens must be a list", where)
    added = []
    seen: dict[int, str] = {}
    for entry in raw:
        if not isinstance(entry, dict) or type(entry.get("id")) is not int or entry["id"] < 0 \
                or not isinstance(entry.get("content"), str):
            raise InputError(f"added token entry is malformed: {entry!r}"[:300], where)
        if entry["id"] in seen and seen[entry["id"]] != entry["content"]:
            raise InputError(f"added_tokens give id {entry['id']} to {seen[entry['id']]!r} and "
                             f"{entry['content']!r}", where)
        seen[entry["id"]] = entry["content"]
        added.append(AddedToken(id=entry["id"], content=entry["content"], special=bool(entry.get("special", False)),
                                normalized=bool(entry.get("normalized", not entry.get("special", False))),
                                lstrip=bool(entry.get("lstrip", False)), rstrip=bool(entry.get("rstrip", False)),
                                single_word=bool(entry.get("single_word", False))))
    if max(seen, default=-1) >= 16 * (len(seen) + 1) + 16_000_000:
        raise InputError(f"added token id {max(seen):,} is beyond any real vocabulary", where)
    return tuple(sorted(added, key=lambda t: t.id))


def _check_model(model_type: str, params: Mapping[str, Any], size: int, where: str) -> None:
    """The model's settings as the tokenizers library reads them (a BPE dropout outside 0..1, a Unigram unk_id that is
    not a piece's id, a value of the wrong type): refused here as the library refuses them, so that ``inspect``,
    ``align`` and ``compare --no-probe`` agree with a compare whose probe builds the tokenizer. Read by the library on
    a one-token stand-in (the vocabulary and merges are checked above)."""
    from tokenizers import Tokenizer

    stand_in: dict[str, Any] = {"type": model_type, **params, "vocab": {"[X]": 0}}
    if model_type == "Unigram":
        unk = params.get("unk_id")
        if type(unk) is int and not 0 <= unk < size:
            raise InputError(f"{_CANNOT_LOAD}: Unigram unk_id {unk:,} is not the id of one of its {size:,} pieces",
                             where)
        stand_in.update(vocab=[["[X]", 0.0]], unk_id=0 if type(unk) is int else unk)
    elif model_type == "BPE":
        stand_in["merges"] = []
    try:
        with panic_output_dropped():
            Tokenizer.from_str(json.dumps({"version": "1.0", "added_tokens": [], "model": stand_in}))
    except BaseException as exc:
        if not library_failure(exc):
            raise
        problem = re.sub(r" at line \d+ column \d+$", "", str(exc).splitlines()[0])[:200]
        raise InputError(f"{_CANNOT_LOAD}: its {model_type} model: {problem}", where) from exc


def _canonical_pipeline(document: Mapping[str, Any], where: str) -> tuple[dict[str, Any], tuple[int, ...],
                                                                           tuple[int, ...]]:
    """Load the pipeline with `tokenizers` on a one-token stand-in model; read it back with defaults filled in."""
    from tokenizers import Tokenizer

    stand_in = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        **{name: document.get(name) for name in PIPELINE},
        "model": {"type": "WordLevel", "vocab": {"[X]": 0}, "unk_token": "[X]"},
    }
    try:
        with panic_output_dropped():
            loaded = Tokenizer.from_str(json.dumps(stand_in))
            canonical = json.loads(loaded.to_str())
            encoding = loaded.encode("a", add_special_tokens=True)
    except BaseException as exc:  # tokenizers raises a bare Exception with the serde message, or panics
        if not library_failure(exc):
            raise
        component = _failing_component(document)
        raise InputError(f"the tokenizers library rejects this tokenizer's {component}: "
                         f"{str(exc).splitlines()[0][:200]}", where) from exc
    ids, mask = encoding.ids, encoding.special_tokens_mask
    body = [i for i, m in enumerate(mask) if not m]
    if body:
        prefix = tuple(ids[: body[0]])
        suffix = tuple(ids[body[-1] + 1:])
    else:
        prefix, suffix = tuple(ids), ()
    return {name: canonical.get(name) for name in PIPELINE}, prefix, suffix


def _failing_component(document: Mapping[str, Any]) -> str:
    from tokenizers import Tokenizer

    for name in PIPELINE:
        probe = {"version": "1.0", "added_tokens": [], name: document.get(name),
                 "model": {"type": "WordLevel", "vocab": {"[X]": 0}, "unk_token": "[X]"}}
        try:
            with panic_output_dropped():
                Tokenizer.from_str(json.dumps(probe))
        except BaseException as exc:
            if not library_failure(exc):
                raise
            return name.replace("_", "-")
    return "pipeline"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def _digest_strings(strings: Iterable[str | None]) -> str:
    """Digest of a sequence of strings (``None`` for a gap), joined by control characters no token text uses."""
    items = list(strings)
    if None in items:
        items = ["\x02" if item is None else item for item in items]
    return _digest("\x01".join(items))
