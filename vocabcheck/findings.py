"""The finding catalogue: every finding has a stable code, a severity and a message that names ids and strings.

The codes are part of the JSON schema and of `gate` manifests (``allow = [...]``); they never change meaning.
:mod:`vocabcheck.diff` produces the findings; the helpers at the end word their messages (public: diff and its
neighbours use them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .tokenizer import TokenizerProfile


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)


CODES: dict[str, str] = {
    "vocab.summary": "how the two id→string maps line up (counts, first divergent id)",
    "vocab.conflict": "ids that mean different strings in target and draft",
    "vocab.moved": "strings that sit at different ids in target and draft",
    "vocab.target-extends": "tokens only the target has; the draft never proposes them",
    "vocab.draft-extends": "tokens only the draft has; their probability is dropped",
    "vocab.placeholder-renamed": "reserved/placeholder ids that one side gave a real name",
    "vocab.padding-tokens": "placeholder tokens only one side lists (GGUF [PADn] padding): padding rows",
    "vocab.low-overlap": "the draft shares less than half of the target's ids",
    "added.flags": "the same added token with different flags (special, normalized, lstrip, rstrip, single_word)",
    "added.kind": "a token that is an added token on one side and a regular token on the other",
    "tokenizer.model-type": "different tokenizer models (BPE, Unigram, WordPiece, WordLevel)",
    "tokenizer.model-params": "different tokenizer model parameters (byte_fallback, unk_token, ignore_merges...)",
    "tokenizer.merges": "different BPE merges or merge order",
    "tokenizer.scores": "different Unigram scores",
    "pipeline.normalizer": "different normalizers",
    "pipeline.pre-tokenizer": "different pre-tokenizers",
    "pipeline.post-processor": "different post-processors",
    "pipeline.decoder": "different decoders",
    "special.bos": "different beginning-of-sequence tokens",
    "special.eos": "different end-of-sequence tokens",
    "special.pad": "different padding tokens",
    "special.unk": "different unknown tokens",
    "special.missing": "a special token that is not in its own vocabulary",
    "special.add-bos": "one tokenizer adds a token before a sequence and the other does not",
    "special.add-eos": "one tokenizer adds a token after a sequence and the other does not",
    "generation.eos": "different generation-config eos ids",
    "chat-template": "different chat templates",
    "rows.unknown": "no checkpoint: embedding rows are unknown",
    "rows.config-mismatch": "config vocab_size disagrees with the real embedding tensors",
    "rows.embed-head-mismatch": "input embedding and lm_head have different rows",
    "rows.tokenizer-overflow": "the tokenizer emits ids beyond the model's rows: the model itself is broken",
    "rows.padded": "the models have different rows; the alignment pads or cuts",
    "engine.vocab-size": "what engines that compare config.vocab_size conclude",
    "probe.encodings": "the built-in corpus encodes differently",
    "translation.intersection": "the tokens both tokenizers share by the bytes they stand for: what a translated "
                                "draft can propose",
}

SHOW = 5  # examples named in one message


# --- message helpers --------------------------------------------------------------------------------------------


def token_text(token: str | None) -> str:
    if token is None:
        return "(none)"
    text = repr(token)
    return text if len(text) <= 40 else text[:37] + "…'"


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def more(items: Sequence[Any], shown: int = SHOW) -> str:
    return f" (and {len(items) - shown:,} more)" if len(items) > shown else ""


def id_span(items: Sequence[tuple[int, str]]) -> str:
    first, last = items[0][0], items[-1][0]
    return f"id {first}" if first == last else f"ids {first}–{last}"


def merge_text(merges: Sequence[tuple[str, ...]], rank: int) -> str:
    return short(" ".join(merges[rank])) if rank < len(merges) else "(none)"


def ids_text(ids: Sequence[int], tokenizer: TokenizerProfile) -> str:
    return "nothing" if not ids else ", ".join(f"{token_text(tokenizer.token(i))} ({i})" for i in ids)


def ids_with_tokens(ids: Sequence[int], tokens: Sequence[str], limit: int = 8) -> str:
    shown = " ".join(f"{i}:{token_text(t)}" for i, t in list(zip(ids, tokens))[:limit])
    return f"[{shown}{' …' if len(ids) > limit else ''}]"


def special_text(token) -> str:
    if token is None:
        return "none"
    return f"{token_text(token.content)} (id {token.id if token.id is not None else 'missing'})"


def special_json(token) -> dict[str, Any] | None:
    return None if token is None else {"content": token.content, "id": token.id}
