"""Tokenizers in other formats, turned into the `tokenizers` JSON format by the libraries that know them.

- a model directory without tokenizer.json: transformers' ``AutoTokenizer`` (never with remote code), which picks the
  model's tokenizer class from tokenizer_config.json and converts vocab/merges or SentencePiece files;
- a bare SentencePiece ``.model`` file: parsed by transformers' ``SentencePieceExtractor`` and built by
  :mod:`vocabcheck.sources.spm`, which follows the model's own normalizer spec so that the result encodes like
  ``SentencePieceProcessor.encode`` on every supported transformers release;
- tiktoken BPE ranks: vocabulary and merges in the layout Hugging Face publishes for tiktoken-born tokenizers
  (Qwen2/2.5: one merge per non-byte token, in rank order), see :func:`from_tiktoken_ranks`;
- the tokenizer metadata of a GGUF file: transformers' GGUF tokenizer builders, see :func:`from_gguf_metadata`;
- a Mistral Tekken file: transformers' ``convert_tekken_tokenizer``, see :func:`from_tekken`.
"""

from __future__ import annotations

import base64
import itertools
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, UnsupportedModel, library_failure, panic_output_dropped


@dataclass(frozen=True)
class AddedTokenSpec:
    id: int
    content: str
    special: bool = True


# Files transformers' tokenizer classes read from a directory; one of them that is not a regular file is refused.
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "config.json",
                   "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
# Never copied for a conversion: code and weights.
NOT_STAGED = (".py", ".pyc", ".so", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack",
              ".onnx", ".pkl", ".npz", ".ot", ".tflite")


def from_transformers(directory: Path) -> str:
    """tokenizer.json text for a directory that ships only slow-tokenizer files, converted by transformers.

    transformers reads a copy of the directory's regular files (:func:`_staged`) without code or weights: a FIFO or a
    device cannot block it, and no Python module of the repository is there to import.
    """
    import tempfile

    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory(prefix="vocabcheck-convert-") as scratch:
        staged = _staged(directory, Path(scratch))

        def here(text: str) -> str:
            return text.replace(str(staged), str(directory))

        try:
            with panic_output_dropped():
                tokenizer = AutoTokenizer.from_pretrained(str(staged), trust_remote_code=False,
                                                          local_files_only=True)
        except ValueError as exc:
            text = here(str(exc))
            if "trust_remote_code" in text or "custom code" in text:
                raise UnsupportedModel("this tokenizer needs code from the repository, which vocabcheck never runs",
                                       directory) from exc
            raise InputError(f"transformers cannot build a tokenizer here: {(text.splitlines() or [''])[0][:300]}",
                             directory) from exc
        except BaseException as exc:  # config validation, the tokenizers library's bare Exception or a panic...
            if not library_failure(exc):
                raise
            raise InputError(f"transformers cannot build a tokenizer here: {here(_describe(exc))}",
                             directory) from exc
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        raise UnsupportedModel(f"transformers loaded a {type(tokenizer).__name__}, which has no tokenizers backend",
                               directory)
    return _serialise(backend, directory)


def _staged(directory: Path, scratch: Path) -> Path:
    """A copy of the regular files of ``directory`` that a tokenizer conversion may read (symbolic links followed;
    no code, no weights, nothing over the tokenizer.json size cap)."""
    import shutil
    import stat

    from .base import MAX_TOKENIZER_JSON_BYTES

    staged = scratch / "model"
    staged.mkdir()
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise InputError(f"cannot list the directory: {exc.strerror or exc}", directory) from exc
    for entry in entries:
        if entry.name.lower().endswith(NOT_STAGED):
            continue
        try:
            status = entry.stat()
        except OSError:  # a dangling link, a loop: not a file to read
            status = None
        if status is None or not stat.S_ISREG(status.st_mode):
            if entry.name in TOKENIZER_FILES:  # a FIFO, a device, a directory, a dangling link
                raise InputError(f"{entry.name} is not a regular file", entry)
            continue
        if status.st_size > MAX_TOKENIZER_JSON_BYTES:
            if entry.name in TOKENIZER_FILES:
                raise InputError(f"{entry.name} is {status.st_size:,} bytes, over the "
                                 f"{MAX_TOKENIZER_JSON_BYTES:,}-byte limit", entry)
            continue
        try:
            shutil.copyfile(entry, staged / entry.name)
        except OSError as exc:
            raise InputError(f"cannot read {entry.name}: {exc.strerror or exc}", entry) from exc
    return staged


def _serialise(backend, where: str | Path) -> str:
    """``backend.to_str()``, after checking that the vocabulary is not sparse beyond reason: the library writes one
    entry per id up to the largest, so a vocab.json (or ranks file) with an id of 4,294,967,295 would take minutes and
    gigabytes."""
    try:
        ids = backend.get_vocab(with_added_tokens=False).values()
        top = max(ids, default=-1)
        if top >= 16 * (len(ids) + 1024):
            raise InputError(f"vocab is sparse beyond reason: {len(ids):,} tokens but an id of {top:,}", where)
        with panic_output_dropped():
            return backend.to_str()
    except BaseException as exc:
        if not library_failure(exc) or isinstance(exc, InputError):
            raise
        raise InputError(f"the tokenizers library cannot write this tokenizer: {_describe(exc)}", where) from exc


def _describe(exc: BaseException) -> str:
    """``Type: first line of the message`` for an exception a library raised on a user's file."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def from_sentencepiece(path: Path) -> str:
    """tokenizer.json text for a SentencePiece ``.model`` file."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    from .spm import tokenizer_from_proto

    try:
        proto = SentencePieceExtractor(str(path)).proto
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InputError(f"not a SentencePiece model: {str(exc).splitlines()[0][:200] or type(exc).__name__}",
                         path) from exc
    pieces = list(proto.pieces)
    if not pieces:
        raise InputError("SentencePiece model has no pieces", path)
    if proto.trainer_spec.model_type not in (1, 2):  # Unigram, BPE
        raise UnsupportedModel(f"SentencePiece model type {proto.trainer_spec.model_type} is not BPE or Unigram",
                               path)
    try:
        with panic_output_dropped():
            tokenizer = tokenizer_from_proto(proto)
            if tokenizer is None:
                raise InputError("could not convert this SentencePiece model", path)
            # Unknown (2) and control (3) pieces are special; user-defined pieces (4) are added but not special.
            tokenizer.add_special_tokens([AddedToken(p.piece, special=True, normalized=False)
                                          for p in pieces if p.type in (2, 3)])
            tokenizer.add_tokens([AddedToken(p.piece, special=False, normalized=False)
                                  for p in pieces if p.type == 4])
            return tokenizer.to_str()
    except BaseException as exc:  # the converter and the tokenizers library on a damaged proto
        if not library_failure(exc) or isinstance(exc, InputError):
            raise
        raise InputError(f"could not convert this SentencePiece model: {_describe(exc)}",
                         path) from exc


# No real tiktoken vocabulary has a token over 128 bytes; deriving a token's merge costs its length squared.
MAX_TIKTOKEN_TOKEN_BYTES = 1024
MAX_TIKTOKEN_MERGE_WORK = 100_000_000  # the sum of squared token lengths (Qwen3.6's 248,044 ranks: 17.6 million)


def read_tiktoken_ranks(data: bytes, where: str | Path) -> dict[bytes, int]:
    """Parse a tiktoken ranks file: one ``base64-token rank`` pair per line; ranks are distinct non-negative ids."""
    _check_rank_count(data, where)
    ranks: dict[bytes, int] = {}
    seen: dict[int, int] = {}
    work = 0
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank_text = line.split()
            value = base64.b64decode(token, validate=True)
            rank = int(rank_text)
        except ValueError as exc:
            raise InputError(f"line {number} is not '<base64 token> <rank>'", where) from exc
        if not 0 <= rank < 2**32:
            raise InputError(f"line {number}: rank {rank_text[:40].decode('ascii', 'replace')} is not an id "
                             "(0 to 4,294,967,295)", where)
        if rank in seen:
            raise InputError(f"line {number}: rank {rank:,} is also given on line {seen[rank]:,}", where)
        if len(value) > MAX_TIKTOKEN_TOKEN_BYTES:
            raise InputError(f"line {number}: a token of {len(value):,} bytes, over the "
                             f"{MAX_TIKTOKEN_TOKEN_BYTES:,}-byte limit", where)
        work += len(value) ** 2
        seen[rank] = number
        ranks[value] = rank
    if not ranks:
        raise InputError("tiktoken file holds no ranks", where)
    top = max(ranks.values())
    if top >= 16 * (len(ranks) + 1024):
        raise InputError(f"ranks are sparse beyond reason: {len(ranks):,} tokens but a rank of {top:,}", where)
    if work > MAX_TIKTOKEN_MERGE_WORK:
        raise InputError("tiktoken file holds more long tokens than any real vocabulary (the sum of squared token "
                         f"lengths is {work:,}, over {MAX_TIKTOKEN_MERGE_WORK:,})", where)
    return ranks


def _check_rank_count(data: bytes, where: str | Path) -> None:
    """Refuse, before splitting its lines, a ranks file whose tokenizer.json would hold more entries than the profile
    accepts (:func:`~vocabcheck.sources.base.check_entries`): each rank is at least one entry, its vocabulary token."""
    from .base import TOKENIZER_ENTRIES_ENV, max_tokenizer_entries

    limit = max_tokenizer_entries()
    if data.count(b"\n") + 1 <= limit:
        return
    if sum(map(operator.truth, itertools.islice(_RANK_LINE.finditer(data), limit + 1))) > limit:
        raise InputError(f"tiktoken ranks file holds more than {limit:,} ranks, each an entry of its tokenizer.json: "
                         f"over the {limit:,}-entry limit that keeps a comparison within a few GB of memory; "
                         f"{TOKENIZER_ENTRIES_ENV} raises it", where)


_RANK_LINE = re.compile(rb"^[ \t\r\f\v]*[^\s]", re.MULTILINE)  # a line that is not blank


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


# --- GGUF -------------------------------------------------------------------------------------------------------

def from_gguf_metadata(architecture: str, metadata: Mapping[str, object], where: str | Path) -> tuple[str, dict]:
    """tokenizer.json text and tokenizer_config-style fields for the tokenizer a GGUF file describes.

    The metadata keys are mapped as transformers maps them (``GGUF_TOKENIZER_MAPPING``), the tokenizer is built by
    transformers' GGUF builders (``convert_gguf_tokenizer``: byte-level BPE for ``gpt2``, SentencePiece-style BPE for
    ``llama``, Unigram for ``t5``), and wrapped as ``AutoTokenizer.from_pretrained(..., gguf_file=...)`` wraps it, so
    that the add-bos/add-eos flags become the post-processor transformers gives the tokenizer.
    """

    import transformers
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    transformers.logging.set_verbosity_error()
    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer_dict, config = grouped["tokenizer"], grouped["tokenizer_config"]
    config.pop("chat_template", None)  # the source carries it; the tokenizer does not need it
    # the file's own flags, read here: transformers' key mapping names them only from 5.24 on
    for name in ("add_bos_token", "add_eos_token"):
        if isinstance(metadata.get(f"tokenizer.ggml.{name}"), bool):
            config[name] = metadata[f"tokenizer.ggml.{name}"]
    tokenizer_type = tokenizer_dict.get("tokenizer_type")
    # the defaults transformers' get_gguf_tokenizer applies: llama.cpp adds BOS to a SentencePiece vocabulary that
    # does not say otherwise, and Gemma 4's chat template writes <bos> itself
    if tokenizer_type == "llama":
        config.setdefault("add_bos_token", True)
    elif tokenizer_type == "gemma4":
        config["add_bos_token"] = False
    tokens = tokenizer_dict["tokens"]
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unk_token_id"),
                      ("pad_token", "pad_token_id")):
        config[name] = tokens[tokenizer_dict[key]] if key in tokenizer_dict else None
    try:
        with panic_output_dropped():
            backend, extra = convert_gguf_tokenizer(architecture, tokenizer_dict)
            wrapped = PreTrainedTokenizerFast(tokenizer_object=backend, **config, **extra)
        text = _serialise(wrapped.backend_tokenizer, where)
    except ValueError as exc:
        if "Cannot build a tokenizer" in str(exc):
            raise UnsupportedModel(f"GGUF tokenizer.ggml.model={tokenizer_type!r} is not one transformers can build "
                                   "a tokenizer from", where) from exc
        raise InputError(f"transformers cannot build this GGUF tokenizer: {str(exc).splitlines()[0][:300]}",
                         where) from exc
    except BaseException as exc:  # KeyError, TypeError... the tokenizers library's bare Exception, or a panic
        if not library_failure(exc) or isinstance(exc, InputError):
            raise
        raise InputError(f"transformers cannot build this GGUF tokenizer: {_describe(exc)}", where) from exc
    # transformers' builders write "" for an absent BPE prefix/suffix; the profile reads both alike
    return text, {k: v for k, v in config.items() if k.startswith("add_")}


# --- Mistral Tekken ---------------------------------------------------------------------------------------------


def from_tekken(path: Path) -> tuple[str, dict]:
    """tokenizer.json text and special-token names for a Mistral Tekken file (``tekken.json``).

    transformers' ``convert_tekken_tokenizer`` does the work (``MistralConverter``: ranks to byte-level BPE, the
    special tokens at ids 0..n-1 with ``<SPECIAL_i>`` fillers, vocabulary cut to ``default_vocab_size``), the same
    conversion ``AutoTokenizer`` applies to a repository that ships only tekken.json. No chat template is generated.
    """
    import json

    import transformers
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

    transformers.logging.set_verbosity_error()
    try:
        with panic_output_dropped():
            tokenizer = convert_tekken_tokenizer(str(path), chat_template="")
    except ImportError as exc:  # files without a special_tokens list take mistral-common's defaults
        raise UnsupportedModel("this Tekken file lists no special tokens; transformers needs the mistral-common "
                               "package for their defaults (pip install mistral-common)", path) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"Tekken file is not valid JSON: {str(exc).splitlines()[0][:200]}", path) from exc
    except BaseException as exc:  # KeyError, TypeError, ValueError... or the tokenizers library's errors and panics
        if not library_failure(exc):
            raise
        raise InputError(f"not a Tekken tokenizer file transformers can convert ({_describe(exc)})", path) from exc
    names = {role: getattr(tokenizer, role, None) for role in ("bos_token", "eos_token", "unk_token", "pad_token")}
    return _serialise(tokenizer.backend_tokenizer, path), {k: v for k, v in names.items() if isinstance(v, str)}
