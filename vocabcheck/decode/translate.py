"""Speculative decoding across two tokenizers, through the tokens they share (token-level intersection).

The draft's next-token distribution is restricted to the shared tokens (:attr:`Translation.pairs`: draft ids that
stand for the same bytes as a target id, plus special tokens matched by role and added tokens matched by content),
renormalised and placed on the target's ids; proposals are drawn from that one mapped distribution and the target
verifies them with the usual rule, so greedy output is the target's own and sampled output follows the target's
warped distribution exactly. Nothing else about the draft matters for correctness: its context only decides how
often it is right.

The draft keeps its context in its own tokenization, per row. A target token that is shared is fed as its draft
id; any other (and any token that completes a character whose first bytes are waiting) is turned into bytes and
re-encoded from the point where both tokenizations last agreed — the end of what the draft has already been fed —
with the draft's own tokenizer; where that tokenizer would change the bytes (a SentencePiece tokenizer prepends a
space to a fragment), with its tokenization of the fragment after a line break, cut where the fragment begins, and
failing that the bytes are split greedily into the longest draft tokens, ordinary tokens before ``<0xNN>`` byte
tokens. An incomplete UTF-8 sequence waits for the token that completes it; one that the next token does not
continue is fed byte for byte, so the draft always sees exactly the target's bytes. The draft's cache is never recomputed: rejected proposals are rolled back as in
the same-tokenizer case, and a row with nothing new to feed re-feeds its last token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .device import host_to_device
from .metrics import RowMetrics
from .proposers import DraftProposer, Outcome, Prefilled, beyond_a_step, left_pad
from .sampling import pick_greedy


class TranslatedMapping:
    """The shared tokens as tensors (a :class:`vocabcheck.decode.proposers.DraftMapping`): draft logits placed on
    the target's ids, target ids as draft input ids."""

    def __init__(self, translation, target_rows: int, device: torch.device):
        target_ids, draft_ids = translation.pairs
        if not target_ids:
            raise ValueError("the tokenizers share no tokens: nothing a translated draft proposes could be accepted")
        self.target_rows = target_rows
        self.target_ids = torch.tensor(target_ids, device=device)
        self.draft_ids = torch.tensor(draft_ids, device=device)
        lookup = torch.zeros(max(max(target_ids) + 1, target_rows), dtype=torch.long, device=device)
        lookup[self.target_ids] = self.draft_ids
        self.lookup = lookup
        self.draft_rows = int(max(draft_ids)) + 1
        # for each target row, the draft logit it takes: its shared draft id, or one past the draft's ids (-inf)
        source = torch.full((target_rows,), self.draft_rows, dtype=torch.long, device=device)
        inside = self.target_ids < target_rows
        source[self.target_ids[inside]] = self.draft_ids[inside]
        self.source = source

    def to_draft(self, ids: torch.Tensor) -> torch.Tensor:
        """Shared target ids (every proposal is one) as the draft's ids."""
        return self.lookup[ids]

    def logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [..., draft_rows] as float32 logits over the target's rows: -inf outside the shared ids."""
        x = draft_logits[..., : self.draft_rows].float()
        x = torch.cat([x, x.new_full((*x.shape[:-1], 1), float("-inf"))], dim=-1)
        return x.index_select(-1, self.source)

    def greedy(self, draft_logits: torch.Tensor) -> torch.Tensor:
        return pick_greedy(draft_logits[..., self.draft_ids], self.target_ids)


class Translator:
    """Target tokens as draft tokens, for one pair (shared by the rows): the pair's
    :class:`vocabcheck.translation.Translation`, the draft's own tokenizer, and the target's token strings (for added
    tokens the draft has no counterpart of)."""

    def __init__(self, translation, draft_tokenizer, target_tokens: Sequence[str | None]):
        self.translation = translation
        self.direct = dict(zip(*translation.pairs))
        self.target_table = translation.intersection.target.table
        self.target_tokens = target_tokens
        self.tokenizer = draft_tokenizer
        self.draft_table = translation.intersection.draft.table
        self.by_bytes = _draft_ids_by_bytes(self.draft_table, frozenset(self.direct.values()),
                                            translation.intersection.draft.byte_fallback_ids)
        self.longest = max((len(b) for b in self.by_bytes), default=1)

    def token_bytes(self, target_id: int) -> bytes:
        """What a target token stands for: its bytes, or an added token's content as UTF-8."""
        if not self.is_added(target_id):
            return self.target_table[target_id]
        content = self.target_tokens[target_id] if 0 <= target_id < len(self.target_tokens) else None
        return (content or "").encode("utf-8")

    def is_added(self, target_id: int) -> bool:
        """An added or special token: no standalone bytes of its own."""
        return not (0 <= target_id < len(self.target_table) and self.target_table[target_id] is not None)

    def encode(self, text: str) -> list[int]:
        """``text`` as draft ids whose bytes are exactly the text's: the draft's tokenizer where it keeps them; else
        (a SentencePiece tokenizer prepends a space to a fragment) the draft's tokenization of the text after a line
        break, cut where the text begins; else the greedy split."""
        data = text.encode("utf-8")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self._bytes(ids) == data:
            return ids
        ids = self.tokenizer.encode("\n" + text, add_special_tokens=False).ids
        at, tail = 0, self._bytes(ids)
        while tail is not None and len(tail) > len(data) and at < len(ids):  # drop the tokens of the line break
            tail = tail[len(self.draft_table[ids[at]]):]
            at += 1
        return ids[at:] if tail == data else self.split(data)

    def _bytes(self, ids: Sequence[int]) -> bytes | None:
        """The bytes of draft ids, ``None`` when one has no bytes of its own (an added token)."""
        table = self.draft_table
        if not all(0 <= i < len(table) and table[i] is not None for i in ids):
            return None
        return b"".join(table[i] for i in ids)

    def split(self, data: bytes) -> list[int]:
        """Greedy longest-match of ``data`` over the draft's token bytes (bytes no draft token covers are skipped)."""
        ids, at = [], 0
        while at < len(data):
            for size in range(min(self.longest, len(data) - at), 0, -1):
                found = self.by_bytes.get(data[at:at + size])
                if found is not None:
                    ids.append(found)
                    at += size
                    break
            else:
                at += 1
        return ids


def _draft_ids_by_bytes(table: Sequence[bytes | None], shared: frozenset[int],
                        byte_fallback: frozenset[int]) -> dict[bytes, int]:
    """The draft id that re-encoding uses for each byte string: an ordinary token before a ``<0xNN>`` byte-fallback
    token (``.`` is the draft's ``.``, not ``<0x2E>``: a draft never sees its byte tokens where its own tokenizer
    writes the ordinary one), and among those the draft token a shared target token maps to (a target token's bytes
    re-encode to exactly its one-to-one counterpart), then the lowest id."""
    best: dict[bytes, tuple[bool, bool, int]] = {}
    for draft_id, value in enumerate(table):
        if not value:
            continue
        rank = (draft_id in byte_fallback, draft_id not in shared, draft_id)
        if value not in best or rank < best[value]:
            best[value] = rank
    return {value: rank[-1] for value, rank in best.items()}


@dataclass
class RowContext:
    """One row's draft context: which target bytes still wait to be fed, and the draft id fed last. It counts, in the
    row's metrics, the target tokens no shared token stands for and the re-encodings."""

    translator: Translator
    metrics: RowMetrics
    held: bytearray = field(default_factory=bytearray)  # bytes of unshared target tokens inside a character, unfed
    last_fed: int = 0

    def count(self, emitted: Sequence[int]) -> None:
        """Count the emitted target tokens that no shared token stands for (the draft could not have proposed them)."""
        self.metrics.outside_shared += sum(token not in self.translator.direct for token in emitted)

    def feed(self, target_ids: Sequence[int]) -> list[int]:
        """The draft ids that carry these target tokens, in order. A shared token is fed as its one-to-one
        counterpart; the bytes of any other are held until they end on a character boundary and then re-encoded,
        with the tokens that complete the character (shared or not). Bytes held for a character that the next token
        does not continue are fed byte for byte first: the draft always gets exactly the bytes the target emitted."""
        out: list[int] = []
        for target_id in target_ids:
            direct = self.translator.direct.get(target_id)
            data = self.translator.token_bytes(target_id)
            if self.held and _utf8_state(self.held + data) == "broken":
                out += self._reencode()
            if direct is not None and not self.held:
                out.append(direct)
                continue
            self.held += data
            if _utf8_state(self.held) != "open":
                out += self._reencode()
        if out:
            self.last_fed = out[-1]
        return out

    def _reencode(self) -> list[int]:
        """The held bytes as draft ids: as text through :meth:`Translator.encode` where they are UTF-8, else split
        byte for byte (so the draft is fed exactly the bytes the target emitted)."""
        data = bytes(self.held)
        self.held.clear()
        self.metrics.reencodings += 1
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return self.translator.split(data)
        return self.translator.encode(text)


def _utf8_state(data: bytes) -> str:
    """``"complete"`` UTF-8, ``"open"`` (UTF-8 cut inside its last character: the next bytes may complete it) or
    ``"broken"``."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "open" if exc.end == len(data) and exc.reason == "unexpected end of data" else "broken"
    return "complete"


class TranslatingProposer(DraftProposer):
    """A draft model with its own tokenizer: contexts per row in draft ids, proposals as shared target ids. What
    each row owes the draft is kept on the host (``owed``, draft ids) until its next proposal pass, so steps of
    width 0 only add to it."""

    def __init__(self, draft, translator: Translator, metrics: Sequence[RowMetrics], target_rows: int,
                 device: torch.device):
        super().__init__(draft, TranslatedMapping(translator.translation, target_rows, device), len(metrics), device)
        self.translator = translator
        self.rows = [RowContext(translator, row) for row in metrics]
        self.owed: list[list[int]] = [[] for _ in metrics]
        self.device = device

    def prefill(self, start: Prefilled) -> None:
        """Each prompt in the draft's own tokenization, then the target's first token is owed."""
        encoded = [prompt_ids(self.translator, prompt) for prompt in start.prompts]
        for context, ids in zip(self.rows, encoded):
            context.last_fed = ids[-1]
        tokens, real = left_pad(encoded, self.device)
        self.state.forward(tokens, keep=1, real=real)
        for context, token in zip(self.rows, start.first_host):
            context.count([token])
        self.owed = [context.feed([token]) for context, token in zip(self.rows, start.first_host)]

    def _unseen(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What each row owes, left-padded. A row that owes nothing (a character still incomplete) re-feeds its
        last token, taken back from the cache first, so that every row has logits to draw its next proposal from."""
        refeed = [0 if ids else 1 for ids in self.owed]
        if any(refeed):
            self.state.rollback(host_to_device(refeed, self.device), refeed)
        rows = [ids or [context.last_fed] for ids, context in zip(self.owed, self.rows)]
        self.owed = [[] for _ in rows]
        return left_pad(rows, self.device)

    def commit(self, outcome: Outcome) -> None:
        """Roll back rejected proposals, then add to what each row owes the draft what it emitted beyond what the
        draft has seen: the target's token, and the last proposal where every proposal was accepted."""
        width = outcome.proposals.width
        rejected = []
        for context, tokens, n, owed in zip(self.rows, outcome.emitted, outcome.count_host, self.owed):
            context.count(tokens)
            rejected.append(max(0, width - 1 - n))
            if len(tokens) <= n:  # eos or the length budget ended the row inside its accepted run: it leaves
                continue
            seen = min(n, width - 1) if width else 0  # accepted proposals the draft already consumed
            if seen:
                context.last_fed = self.translator.direct[tokens[seen - 1]]
            owed += context.feed(tokens[seen:])
        if any(rejected):
            self.state.rollback(host_to_device(rejected, self.device), rejected)

    def keep_rows(self, live: list[int], rows: torch.Tensor) -> None:
        self.state.keep_rows(rows)
        self.rows = [self.rows[i] for i in live]
        self.owed = [self.owed[i] for i in live]

    def backlog(self) -> int:
        """Positions the next proposal pass feeds: the most any row owes (a row that owes nothing re-feeds one)."""
        return max((len(ids) for ids in self.owed), default=0) or 1

    def catch_up(self) -> int:
        return beyond_a_step(self.backlog())


def prompt_ids(translator: Translator, prompt: Sequence[int]) -> list[int]:
    """A prompt in the draft's tokenization: its text through the draft's tokenizer in one piece between special
    tokens, which map by role or content (or, where the draft has no such token, count as their text)."""
    ids: list[int] = []
    segment = bytearray()
    for token in prompt:
        mapped = translator.direct.get(token)
        if mapped is not None and translator.is_added(token):
            if segment:
                ids += translator.encode(segment.decode("utf-8", "replace"))
                segment.clear()
            ids.append(mapped)
        else:
            segment += translator.token_bytes(token)
    if segment:
        ids += translator.encode(segment.decode("utf-8", "replace"))
    return ids or [next(iter(translator.direct.values()))]
