"""How the sources layer says that a download is under way, without drawing anything.

A caller that wants to show progress registers a hook for a block of code (:func:`report_downloads`); the sources
layer calls it with one :class:`Download` event per step of each file it downloads. The CLI registers a hook that
draws a progress bar (:mod:`vocabcheck.render.progress`); a library caller registers its own or none, and then
nothing is drawn.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Download:
    """One file's download at one moment: ``key`` tells files apart, ``done`` says the download has ended (finished
    or failed) and its display can go."""

    key: int
    label: str
    completed: float
    total: float | None
    done: bool = False


DownloadHook = Callable[[Download], None]

_HOOK: ContextVar[DownloadHook | None] = ContextVar("vocabcheck_download_hook", default=None)
_KEYS = itertools.count(1)


@contextmanager
def report_downloads(hook: DownloadHook | None) -> Iterator[None]:
    """Call ``hook`` for every download inside the block (``None``: report to no one, also inside an outer block)."""
    token = _HOOK.set(hook)
    try:
        yield
    finally:
        _HOOK.reset(token)


def current_hook() -> DownloadHook | None:
    """The hook registered for the calling context. Read it in the thread that starts the downloads and hand it to
    worker threads: a thread pool's workers do not inherit the caller's context."""
    return _HOOK.get()


def new_key() -> int:
    return next(_KEYS)
