"""What one model is: its tokenizer, its special tokens, its embedding rows, and a fingerprint.

The tokenizer as data (its vocabulary, merges, added tokens and pipeline, fingerprinted) is :mod:`vocabcheck.tokenizer`;
this module adds what the model's other files say about it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import ModelConfig, read_config, read_generation_eos
from .sources import ModelSource, TensorShape, open_model
from .tokenizer import TokenizerProfile, tokenizer_profile

ROLES = ("bos", "eos", "pad", "unk")


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
    config: ModelConfig  # what config.json says, typed (vocabcheck.config)
    source: ModelSource = field(repr=False)

    @property
    def fingerprint(self) -> str:
        return self.tokenizer.fingerprint

    @property
    def name(self) -> str:
        return self.spec


def profile_of(spec: str) -> ModelProfile:
    """The profile of the model a spec names (a directory, a tokenizer file, a hub id or a GGUF file): the one way
    from a spec to a profile (:func:`vocabcheck.check.compare` reads a pair's files side by side instead)."""
    return build_profile(open_model(spec))


def build_profile(source: ModelSource, *, merges_checked_elsewhere: bool = False) -> ModelProfile:
    """What one model is. ``merges_checked_elsewhere``: see :func:`~vocabcheck.tokenizer.tokenizer_profile`."""
    config = read_config(source.config, _where(source, "config", "config.json"))
    tokenizer = tokenizer_profile(source.tokenizer_json, source.tokenizer_where,
                                  merges_checked_elsewhere=merges_checked_elsewhere)
    specials = _special_tokens(source, tokenizer, config)
    eos, eos_source = _generation_eos(source, config, specials)
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
        config_vocab_size=config.vocab_size,
        embeddings=_embeddings(source.tensors, config),
        architecture=config.architecture,
        config=config,
        source=source,
    )


def _where(source: ModelSource, fact: str, name: str) -> str:
    """The file a fact came from, for an error about it."""
    return source.provenance.get(fact) or f"{source.location.rstrip('/')}/{name}"


# --- special tokens ---------------------------------------------------------------------------------------------


def _special_tokens(source: ModelSource, tokenizer: TokenizerProfile, config: ModelConfig) -> SpecialTokens:
    roles: dict[str, SpecialToken | None] = {}
    for role in ROLES:
        content = _content(source.tokenizer_config.get(f"{role}_token"))
        if content is None:
            content = _content(source.special_tokens_map.get(f"{role}_token"))
        if content is not None:
            roles[role] = SpecialToken(content, tokenizer.ids.get(content))
            continue
        token_id = config.token_id(role)
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


def _generation_eos(source: ModelSource, config: ModelConfig,
                    specials: SpecialTokens) -> tuple[tuple[int, ...], str | None]:
    generation = read_generation_eos(source.generation_config,
                                     _where(source, "generation_config", "generation_config.json"))
    for name, ids in (("generation_config", generation), ("config", config.eos_ids())):
        if ids:
            return ids, source.provenance.get(name, name)
    if specials.eos is not None and specials.eos.id is not None:
        return (specials.eos.id,), source.provenance.get("tokenizer_config", "tokenizer")
    return (), None


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


def _embeddings(tensors: Mapping[str, TensorShape] | None, config: ModelConfig) -> Embeddings:
    tie_value, hidden, config_vocab = config.tie_word_embeddings, config.hidden_size, config.vocab_size
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
        return Embeddings(config_vocab, config_vocab, None, None, tie_value, hidden, "config")
    return Embeddings(None, None, None, None, None, hidden, "unknown")
