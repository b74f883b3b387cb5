"""Translation between two different tokenizers: which tokens stand for the same bytes (the token-level intersection).

A pair whose ids mean different things can still run speculative decoding *translated* (Timor et al., "Lossless
speculative decoding algorithms for heterogeneous vocabularies", ICML 2025): the draft proposes only tokens that
stand for the same bytes in both vocabularies, each is mapped to the target's id, and the target verifies as usual.
This package computes that intersection from the two profiles, as data the decoder consumes.

**What a token stands for on its own** is read from the tokenizer's *decoder*, the component that turns ids back
into text, applied to that token alone:

- ``ByteLevel`` (GPT-2, Qwen, Llama 3, tiktoken and Tekken conversions): every character is one byte of GPT-2's
  byte↔unicode table (:func:`byte_level_alphabet`); a token with a character outside the table stands for its UTF-8
  text, as the `tokenizers` library decodes it;
- ``Metaspace`` and ``Replace('▁' → ' ')`` (SentencePiece conversions): ``▁`` is a space, and with ``ByteFallback``
  a ``<0xNN>`` token is that one byte;
- ``Strip`` before any ``Fuse`` strips every token; after a ``Fuse`` (or a ``ByteLevel``, which fuses) it only trims
  the start of the whole text, as does ``Metaspace``'s prefix handling: a sequence edge, not a property of a token;
- ``BPEDecoder``: the end-of-word suffix is a space.

Byte strings are :class:`bytes`, never :class:`str`: a byte-level token may be an incomplete UTF-8 sequence.
A ``WordPiece`` model or decoder (``##`` continuations), a ``CTC`` decoder, no decoder at all (the library then joins
tokens with spaces) or a decoder step this package does not read leave a tokenizer *not translatable*, with the reason.

Only the *regular* vocabulary (the model's vocabulary, less the ids that added tokens take) is matched by bytes.
Added and special tokens are matched by role (eos ↔ eos, bos ↔ bos, unk, pad), then by equal content. When one side
has several tokens for the same bytes (SentencePiece's ``<0x41>`` and ``A``), the tokens of each side are ranked —
ordinary tokens before byte-fallback tokens, then by id — and paired in that order; the rest are reported as
duplicates. Every mapping is one-to-one.
"""

from .intersection import Intersection, intersect
from .pair import ROLE_ORDER, RolePair, Translation, describe_bytes, translate, unreachable_examples
from .vocab import DecoderTooCostly, VocabBytes, byte_level_alphabet, vocab_bytes

__all__ = ["DecoderTooCostly", "Intersection", "ROLE_ORDER", "RolePair", "Translation", "VocabBytes", "byte_level_alphabet",
           "describe_bytes", "intersect", "translate", "unreachable_examples", "vocab_bytes"]
