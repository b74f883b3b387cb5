"""A SentencePiece model (its protobuf) as a `tokenizers` pipeline that encodes like ``SentencePieceProcessor``.

transformers' converter for bare ``.model`` files changed under us: up to 5.23 it built a BPE model without merges
(every piece split to characters) and ignored the normalizer spec (no dummy prefix, no whitespace clean-up); later
releases follow the spec. vocabcheck supports 5.18 onwards (vLLM pins 5.19), so it builds the pipeline itself from the
proto, the same on every release, and the tests hold it to ``sentencepiece``'s own encoding.

What SentencePiece does, and the piece of the pipeline that does it:

- the normalizer spec, in its order: the precompiled character map (NFKC and friends), then, where
  ``remove_extra_whitespaces``, leading and trailing spaces dropped and runs of spaces collapsed (spaces only:
  newlines and tabs stay), then spaces escaped to "▁" (``escape_whitespaces``);
- ``add_dummy_prefix``: one "▁" before the text. ``Metaspace`` adds it, but only where the text does not already
  start with "▁"; SentencePiece adds it regardless, so a leading "▁" is doubled first;
- BPE: a piece is merged from two others by score, highest first (ties: the lower id); only normal pieces (type 1)
  take part. Unigram: the pieces and their scores as they are;
- user-defined pieces (type 4) are always emitted whole: they are split out before the model runs;
- decoding: "▁" back to spaces, byte pieces (``<0x41>``) back to bytes, and the dummy prefix's space dropped.
"""

from __future__ import annotations

import re

NORMAL, UNKNOWN, CONTROL, USER_DEFINED = 1, 2, 3, 4
UNIGRAM, BPE_MODEL = 1, 2
SPACE = "\u2581"


def bpe_merges(proto) -> list[tuple[str, str]]:
    """The merges that rebuild each normal piece from two normal pieces, in the order SentencePiece applies them."""
    normal = {piece.piece: (piece.score, index) for index, piece in enumerate(proto.pieces) if piece.type == NORMAL}
    candidates = []
    for token, (score, index) in normal.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in normal and right in normal:
                candidates.append((-score, index, left, right))
    candidates.sort()
    return [(left, right) for _, _, left, right in candidates]


def tokenizer_from_proto(proto):
    """The `tokenizers.Tokenizer` for a parsed SentencePiece ``ModelProto`` (BPE or Unigram), None for other model
    types. Special and user-defined pieces are left for the caller to register as added tokens."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE, Unigram

    trainer, spec = proto.trainer_spec, proto.normalizer_spec
    user_defined = [piece.piece for piece in proto.pieces if piece.type == USER_DEFINED]
    if trainer.model_type == BPE_MODEL:
        vocab = {piece.piece: index for index, piece in enumerate(proto.pieces)}
        model = BPE(vocab=vocab, merges=bpe_merges(proto), unk_token=trainer.unk_piece, fuse_unk=True,
                    byte_fallback=trainer.byte_fallback, dropout=None, ignore_merges=bool(user_defined))
    elif trainer.model_type == UNIGRAM:
        model = Unigram([(piece.piece, piece.score) for piece in proto.pieces], unk_id=trainer.unk_id,
                        byte_fallback=trainer.byte_fallback)
    else:
        return None
    tokenizer = Tokenizer(model)

    steps = []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    if spec.escape_whitespaces:
        steps.append(normalizers.Replace(" ", SPACE))
    if spec.add_dummy_prefix:
        steps.append(normalizers.Replace(Regex(f"\\A{SPACE}"), SPACE * 2))
    tokenizer.normalizer = normalizers.Sequence(steps)

    splits = []
    if spec.add_dummy_prefix:
        splits.append(pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=False))
    if user_defined:
        alternatives = "|".join(re.escape(piece) for piece in sorted(user_defined, key=len, reverse=True))
        splits.append(pre_tokenizers.Split(Regex(alternatives), behavior="isolated"))
    if splits:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(splits)

    steps = [decoders.Replace(SPACE, " ")]
    if trainer.byte_fallback:
        steps.append(decoders.ByteFallback())
    if spec.add_dummy_prefix or trainer.byte_fallback:
        steps.append(decoders.Fuse())  # Strip works per token: fused first, it strips the text's start only
    if spec.add_dummy_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer
