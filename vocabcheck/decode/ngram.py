"""Prompt-lookup proposals (n-gram speculation): match the last n tokens against the earlier context and propose
the tokens that followed.

n runs from ``n_max`` down to ``n_min``; the most recent earlier occurrence wins (recent context repeats most).
Proposals are deterministic, so the acceptance rule treats q as a point mass on each proposed token.

The index is incremental: appending a token records the n-grams that end there, so a proposal costs O(n_max)
instead of a scan of the context.
"""

from __future__ import annotations

from collections.abc import Iterable


class NgramIndex:
    def __init__(self, n_min: int = 1, n_max: int = 3):
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 <= ngram-min <= ngram-max")
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        # n-gram -> (end of its latest occurrence, end of the occurrence before that); end = index after the n-gram
        self._ends: dict[tuple[int, ...], tuple[int, int]] = {}

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.tokens.append(int(token))
            end = len(self.tokens)
            for n in range(self.n_min, min(self.n_max, end) + 1):
                key = tuple(self.tokens[end - n:end])
                latest = self._ends.get(key)
                self._ends[key] = (end, latest[0] if latest else -1)

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the last n tokens (longest n first)."""
        if k <= 0:
            return []
        end = len(self.tokens)
        for n in range(min(self.n_max, end), self.n_min - 1, -1):
            found = self._ends.get(tuple(self.tokens[end - n:end]))
            if found is None:
                continue
            earlier = found[1] if found[0] == end else found[0]
            if earlier > 0:
                return self.tokens[earlier:earlier + k]
        return []
