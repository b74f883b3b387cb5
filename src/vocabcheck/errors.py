"""User-facing errors.

Every failure a user can act on is a :class:`VocabcheckError`: it names the file (or hub id) and the problem, and the
CLI renders it as one line with exit code 2. Anything else that escapes is a bug in vocabcheck (exit code 3).
"""

from __future__ import annotations

from pathlib import Path

ISSUE_TRACKER = "https://github.com/vocabcheck/vocabcheck/issues"


class VocabcheckError(Exception):
    """A problem with the user's input: a file, a model, a manifest, an option.

    ``where`` is the file, directory or hub id the problem is about (``None`` when it is about the command line).
    """

    exit_code = 2

    def __init__(self, problem: str, where: str | Path | None = None):
        super().__init__(problem)
        self.problem = problem
        self.where = None if where is None else str(where)

    def one_line(self) -> str:
        text = f"{self.where}: {self.problem}" if self.where else self.problem
        return " ".join(text.split())


class InputError(VocabcheckError):
    """A file exists but cannot be used: malformed, truncated, over a size limit, inconsistent."""


class SourceNotFound(VocabcheckError):
    """A path or hub id that does not resolve to anything."""


class UnsupportedModel(VocabcheckError):
    """A model that vocabcheck will not read (custom tokenizer code, an unknown format)."""


class RemoteError(VocabcheckError):
    """The hub could not be reached or refused the request (offline, gated, missing revision, server error)."""


class RefusedPair(VocabcheckError):
    """A pair that a command refuses to work on because its verdict is incompatible (exit code 1)."""

    exit_code = 1
