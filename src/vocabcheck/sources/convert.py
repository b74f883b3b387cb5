"""Tokenizers in other formats, turned into the `tokenizers` JSON format by the libraries that know them.

- a model directory without tokenizer.json: transformers' ``AutoTokenizer`` (never with remote code), which picks the
  model's tokenizer class from tokenizer_config.json and converts vocab/merges or SentencePiece files;
- a bare SentencePiece ``.model`` file: transformers' ``SpmConverter.build_tokenizer_from_spm_proto``, which follows
  the model's own normalizer spec so that the result encodes like ``SentencePieceProcessor.encode``;
- tiktoken BPE ranks: vocabulary and merges in the layout Hugging Face publishes for tiktoken-born tokenizers
  (Qwen2/2.5: one merge per non-byte token, in rank order), see :func:`from_tiktoken_ranks`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, UnsupportedModel


@dataclass(frozen=True)
class AddedTokenSpec:
    id: int
    content: str
    special: bool = True


def from_transformers(directory: Path) -> str:
    """tokenizer.json text for a directory that ships only slow-tokenizer files, converted by transformers."""
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False, local_files_only=True)
    except ValueError as exc:
        text = str(exc)
        if "trust_remote_code" in text or "custom code" in text:
            raise UnsupportedModel("this tokenizer needs code from the repository, which vocabcheck never runs",
                                   directory) from exc
        raise InputError(f"transformers cannot build a tokenizer here: {text.splitlines()[0][:300]}",
                         directory) from exc
    except (OSError, ImportError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"transformers cannot build a tokenizer here: {str(exc).splitlines()[0][:300]}",
                         directory) from exc
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        raise UnsupportedModel(f"transformers loaded a {type(tokenizer).__name__}, which has no tokenizers backend",
                               directory)
    return backend.to_str()


def from_sentencepiece(path: Path) -> str:
    """tokenizer.json text for a SentencePiece ``.model`` file."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import SentencePieceExtractor, SpmConverter

    try:
        proto = SentencePieceExtractor(str(path)).proto
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InputError(f"not a SentencePiece model: {str(exc).splitlines()[0][:200] or type(exc).__name__}",
                         path) from exc
    pieces = list(proto.pieces)
    if not pieces:
        raise InputError("SentencePiece model has no pieces", path)
    if proto.trainer_spec.model_type == 1:  # Unigram
        vocab: object = [(piece.piece, piece.score) for piece in pieces]
    elif proto.trainer_spec.model_type == 2:  # BPE
        vocab = {piece.piece: index for index, piece in enumerate(pieces)}
    else:
        raise UnsupportedModel(f"SentencePiece model type {proto.trainer_spec.model_type} is not BPE or Unigram",
                               path)
    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
    if tokenizer is None:
        raise InputError("transformers could not convert this SentencePiece model", path)
    # Unknown (2) and control (3) pieces are special; user-defined pieces (4) are added but not special.
    tokenizer.add_special_tokens([AddedToken(p.piece, special=True, normalized=False)
                                  for p in pieces if p.type in (2, 3)])
    tokenizer.add_tokens([AddedToken(p.piece, special=False, normalized=False) for p in pieces if p.type == 4])
    return tokenizer.to_str()


def read_tiktoken_ranks(data: bytes, where: str | Path) -> dict[bytes, int]:
    """Parse a tiktoken ranks file: one ``base64-token rank`` pair per line."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as exc:
            raise InputError(f"line {number} is not '<base64 token> <rank>'", where) from exc
    if not ranks:
        raise InputError("tiktoken file holds no ranks", where)
    return ranks


def from_tiktoken_ranks(ranks: Mapping[bytes, int], pattern: str, added: Iterable[AddedTokenSpec] = (),
                        nfc: bool = False) -> str:
    """A byte-level BPE tokenizer.json for tiktoken ranks.

    The merges are the ones the tiktoken algorithm performs: for every token longer than one byte, the pair whose
    merge creates it when its own bytes are encoded (the adjacent pair of lowest rank is merged first). That gives one
    merge per non-byte token, in rank order, which is the layout of the tokenizer.json files Hugging Face publishes for
    tiktoken-born vocabularies (Qwen2.5: 151,387 merges for 151,643 ranks). transformers' ``TikTokenConverter`` emits
    every valid split instead (294,166 for the same ranks), which encodes alike but is not the published file.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_encoder = bytes_to_unicode()

    def unicode(token: bytes) -> str:
        return "".join(byte_encoder[b] for b in token)

    merges: list[tuple[str, str]] = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        pair = _last_merge(token, ranks)
        if pair is None:
            continue  # unreachable by merges (tiktoken can still emit it only as a whole special piece)
        merges.append((unicode(pair[0]), unicode(pair[1])))
    vocab = {unicode(token): rank for token, rank in ranks.items()}
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False, ignore_merges=False))
    if nfc:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    for spec in sorted(added, key=lambda s: s.id):
        if tokenizer.get_vocab_size(with_added_tokens=True) != spec.id:
            raise ValueError(f"added token {spec.content!r} must take id {spec.id}, the next free id is "
                             f"{tokenizer.get_vocab_size(with_added_tokens=True)}")
        tokenizer.add_tokens([AddedToken(spec.content, special=spec.special, normalized=False)])
    return tokenizer.to_str()


def _last_merge(token: bytes, ranks: Mapping[bytes, int]) -> tuple[bytes, bytes] | None:
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_at = rank, i
        if best_at < 0:
            return None
        parts[best_at:best_at + 2] = [parts[best_at] + parts[best_at + 1]]
    left, right = parts
    if left not in ranks or right not in ranks:
        return None
    return left, right
