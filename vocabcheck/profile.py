"""What one model is: its tokenizer, its special tokens, its embedding rows, and a fingerprint.

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
import re
from collections import ChainMap, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import InputError, library_failure, panic_output_dropped
from .sources import ModelSource, TensorShape

PIPELINE = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "BPE": {"dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": False},
    "Unigram": {"unk_id": None, "byte_fallback": False},
    "WordPiece": {"unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100},
    "WordLevel": {"unk_token": None},
}
ROLES = ("bos", "eos", "pad", "unk")

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


@dataclass(frozen=True)
class SpecialToken:
    content: str | None
    id: int | None


@dataclass(frozen=True)
class SpecialTokens:
    bos: SpecialToken | None
    eos: SpecialToken | None
    pad: SpecialToken | None
    unk: SpecialToken | None
    add_bos: bool
    add_eos: bool
    config_add_bos: bool | None
    config_add_eos: bool | None

    def role(self, name: str) -> SpecialToken | None:
        return getattr(self, name)


@dataclass(frozen=True)
class Embeddings:
    """Row counts of the input embedding and of the output projection, from the tensors when there are any."""

    input_rows: int | None
    output_rows: int | None
    input_tensor: str | None
    output_tensor: str | None
    tied: bool | None
    hidden_size: int | None
    source: str  # "tensors", "config" or "unknown"

    @property
    def rows(self) -> int | None:
        """The rows of the output distribution (what a probability vector has), else of the input embedding."""
        return self.output_rows if self.output_rows is not None else self.input_rows


@dataclass(frozen=True, eq=False)
class ModelProfile:
    spec: str
    kind: str
    location: str
    revision: str | None
    provenance: Mapping[str, str]
    tokenizer: TokenizerProfile
    specials: SpecialTokens
    generation_eos: tuple[int, ...]
    generation_eos_source: str | None
    chat_template: str | None
    config_vocab_size: int | None
    embeddings: Embeddings
    architecture: str | None
    source: ModelSource = field(repr=False)

    @property
    def fingerprint(self) -> str:
        return self.tokenizer.fingerprint

    @property
    def name(self) -> str:
        return self.spec


def build_profile(source: ModelSource) -> ModelProfile:
    tokenizer = tokenizer_profile(source.tokenizer_json, source.provenance.get("tokenizer", source.location))
    config = dict(source.config or {})
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    config_vocab = _int_or_none(config.get("vocab_size", text_config.get("vocab_size")))
    specials = _special_tokens(source, tokenizer, config, text_config)
    eos, eos_source = _generation_eos(source, config, specials)
    architectures = config.get("architectures")
    architecture = (architectures[0] if isinstance(architectures, list) and architectures
                    and isinstance(architectures[0], str) else config.get("model_type"))
    return ModelProfile(
        spec=source.spec,
        kind=source.kind,
        location=source.location,
        revision=source.revision,
        provenance=dict(source.provenance),
        tokenizer=tokenizer,
        specials=specials,
        generation_eos=eos,
        generation_eos_source=eos_source,
        chat_template=source.chat_template,
        config_vocab_size=config_vocab,
        embeddings=_embeddings(source.tensors, config, text_config, config_vocab),
        architecture=architecture if isinstance(architecture, str) else None,
        source=source,
    )


# --- tokenizer --------------------------------------------------------------------------------------------------

_RECENT: OrderedDict[str, TokenizerProfile] = OrderedDict()
_RECENT_SIZE = 4


def tokenizer_profile(text: str, where: str) -> TokenizerProfile:
    """Profile a tokenizer JSON text. Byte-identical texts (a model family sharing one tokenizer.json) are profiled
    once per process: the last few profiles are kept by the SHA-256 of the text."""
    key = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    if key in _RECENT:
        _RECENT.move_to_end(key)
        return _RECENT[key]
    profile = profile_tokenizer(_tokenizer_document(text, where), where)
    _RECENT[key] = profile
    while len(_RECENT) > _RECENT_SIZE:
        _RECENT.popitem(last=False)
    return profile



def _tokenizer_document(text: str, where: str) -> dict[str, Any]:
    from .sources.base import parse_json

    document = parse_json(text, where, "tokenizer.json")
    if not isinstance(document, dict) or not isinstance(document.get("model"), dict):
        raise InputError("not a tokenizers JSON file: no 'model' object", where)
    return document


def profile_tokenizer(document: Mapping[str, Any], where: str) -> TokenizerProfile:
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
                isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], (int, float))
                for e in vocab):
            raise InputError("Unigram vocab must be a list of [piece, score] pairs", where)
        if not all(type(e[1]) is float or -1e308 < e[1] < 1e308 for e in vocab):  # float() of a huge integer fails
            raise InputError("Unigram scores must be numbers a float can hold", where)
        tokens: list[str | None] = [entry[0] for entry in vocab]
        scores = tuple(float(entry[1]) for entry in vocab)
        regular_ids: Mapping[str, int] = {piece: i for i, piece in enumerate(tokens)}
    else:
        if not isinstance(vocab, dict):
            raise InputError(f"{model_type} vocab must be an object mapping tokens to ids", where)
        tokens = _tokens_by_id(vocab, where)
        regular_ids = vocab
        if model_type == "BPE":
            merges = _merges(model.get("merges", []), where)
    regular_count = len(tokens) - tokens.count(None)

    added = _added_tokens(document.get("added_tokens") or [], where)
    for token in added:
        if token.id >= len(tokens):
            tokens.extend([None] * (token.id + 1 - len(tokens)))
        tokens[token.id] = token.content

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
        pairs = [merge.split(" ", 1) for merge in raw]
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


# --- special tokens ---------------------------------------------------------------------------------------------


def _special_tokens(source: ModelSource, tokenizer: TokenizerProfile, config: Mapping[str, Any],
                    text_config: Mapping[str, Any]) -> SpecialTokens:
    roles: dict[str, SpecialToken | None] = {}
    for role in ROLES:
        content = _content(source.tokenizer_config.get(f"{role}_token"))
        if content is None:
            content = _content(source.special_tokens_map.get(f"{role}_token"))
        if content is not None:
            roles[role] = SpecialToken(content, tokenizer.ids.get(content))
            continue
        token_id = _int_or_none(config.get(f"{role}_token_id", text_config.get(f"{role}_token_id")))
        if token_id is None and role == "unk":
            token_id = _model_unk_id(tokenizer)
        roles[role] = SpecialToken(tokenizer.token(token_id), token_id) if token_id is not None else None
    return SpecialTokens(
        bos=roles["bos"], eos=roles["eos"], pad=roles["pad"], unk=roles["unk"],
        # what the tokenizer does, from its post-processor: tokens added before / after one sequence
        add_bos=bool(tokenizer.prefix_ids),
        add_eos=bool(tokenizer.suffix_ids),
        config_add_bos=_bool_or_none(source.tokenizer_config.get("add_bos_token")),
        config_add_eos=_bool_or_none(source.tokenizer_config.get("add_eos_token")),
    )


def _model_unk_id(tokenizer: TokenizerProfile) -> int | None:
    params = tokenizer.model_params
    if tokenizer.model_type == "Unigram":
        return _int_or_none(params.get("unk_id"))
    unk = params.get("unk_token")
    return tokenizer.ids.get(unk) if isinstance(unk, str) else None


def _content(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _generation_eos(source: ModelSource, config: Mapping[str, Any],
                    specials: SpecialTokens) -> tuple[tuple[int, ...], str | None]:
    for name, data in (("generation_config", source.generation_config), ("config", config)):
        if data and "eos_token_id" in data:
            ids = _id_list(data["eos_token_id"])
            if ids:
                return ids, source.provenance.get(name, name)
    if specials.eos is not None and specials.eos.id is not None:
        return (specials.eos.id,), source.provenance.get("tokenizer_config", "tokenizer")
    return (), None


def _id_list(value: Any) -> tuple[int, ...]:
    if type(value) is int and value >= 0:
        return (value,)
    if isinstance(value, list):
        return tuple(dict.fromkeys(v for v in value if type(v) is int and v >= 0))
    return ()


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


# --- embeddings -------------------------------------------------------------------------------------------------

INPUT_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight",
                  "tok_embeddings.weight", "token_embd.weight")
OUTPUT_SUFFIXES = ("lm_head.weight", "embed_out.weight", "output.weight")
NOT_TEXT = ("vision", "visual", "audio", "image", "mm_projector", "speech", "encoder.")


TOP_LEVEL_ONLY = ("output.weight",)  # Mistral consolidated / GGUF names, too generic to match inside a layer


def _pick(tensors: Mapping[str, TensorShape], suffixes: Sequence[str]) -> TensorShape | None:
    """The text model's tensor for the first suffix that matches; the shortest name wins (outermost module)."""
    for suffix in suffixes:
        candidates = [t for name, t in tensors.items()
                      if len(t.shape) == 2 and not any(word in name for word in NOT_TEXT)
                      and (name == suffix or (suffix not in TOP_LEVEL_ONLY and name.endswith("." + suffix)))]
        if candidates:
            return min(candidates, key=lambda t: (len(t.name), t.name))
    return None


def _embeddings(tensors: Mapping[str, TensorShape] | None, config: Mapping[str, Any],
                text_config: Mapping[str, Any], config_vocab: int | None) -> Embeddings:
    tie_value = config.get("tie_word_embeddings", text_config.get("tie_word_embeddings"))
    hidden = _int_or_none(config.get("hidden_size", text_config.get("hidden_size")))
    if tensors:
        embed = _pick(tensors, INPUT_SUFFIXES)
        head = _pick(tensors, OUTPUT_SUFFIXES)
        if embed is not None or head is not None:
            # tied: the head is the input embedding (a config that says tied beside a lone lm_head: the tensors win)
            if head is None or (tie_value is True and embed is not None):
                output_rows = embed.shape[0] if embed is not None else None
                return Embeddings(embed.shape[0] if embed else None, output_rows,
                                  embed.name if embed else None, None, True,
                                  hidden or (embed.shape[1] if embed else None), "tensors")
            return Embeddings(embed.shape[0] if embed else None, head.shape[0], embed.name if embed else None,
                              head.name, False, hidden or head.shape[1], "tensors")
    if config_vocab is not None:
        tied = tie_value if isinstance(tie_value, bool) else None
        return Embeddings(config_vocab, config_vocab, None, None, tied, hidden, "config")
    return Embeddings(None, None, None, None, None, hidden, "unknown")
