"""Whole files from the hub into the Hugging Face cache, through ``hf_hub_download``, bounded in size and in time.

huggingface_hub checks a download's size only after it has read all of it. Here each file has a limit: the size the
hub's file list gives it, or vocabcheck's cap for that kind of file when the list gives none. A download whose announced
size passes the limit is refused before its body is read; one that sends more than the limit is stopped within one
read (huggingface_hub reads 10 MB at a time), whatever its ``Content-Length`` said. huggingface_hub writes a download to
a temporary file that it deletes when the download fails, so nothing of a refused file stays in the cache.

A small file's download runs under the hub deadline (:func:`.transport.deadline`); a weight file's (``run``,
``bench``) is bounded by the per-read timeouts and its size alone, as it may rightly take long.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from ...errors import InputError, RemoteError
from ..progress import Download, DownloadHook, current_hook, new_key
from .failures import State, naming
from .files import is_weight_file, size_cap
from .snapshot import Snapshot
from .transport import deadline


@dataclass(frozen=True)
class SizeLimit:
    """The most bytes one download may bring: the size in the hub's file list (``listed``) or vocabcheck's cap."""

    name: str
    bytes: int
    listed: bool

    def check_announced(self, total: float | None) -> None:
        if total is None or total <= self.bytes:
            return
        if self.listed:
            raise RemoteError(f"{self.name}: the hub announced {int(total):,} bytes, more than the {self.bytes:,} its "
                              "file list gives; nothing downloaded")
        raise InputError(f"{self.name} is {int(total):,} bytes on the hub, over the {self.bytes:,}-byte limit")

    def check_received(self, received: float) -> None:
        if received <= self.bytes:
            return
        if self.listed:
            raise RemoteError(f"{self.name}: the hub sent more than the {self.bytes:,} bytes its file list gives; "
                              "download stopped, nothing kept")
        raise InputError(f"{self.name}: the hub sent more than the {self.bytes:,}-byte limit for this file; "
                         "download stopped, nothing kept")


def size_limit(name: str, listed: int | None, cap: int | None) -> SizeLimit | None:
    if listed is not None and (cap is None or listed <= cap):
        return SizeLimit(name, listed, listed=True)
    return SizeLimit(name, cap, listed=False) if cap is not None else None


def fetch(snapshot: Snapshot, names: Iterable[str], state: State, *, weights: bool = False,
          workers: int = 1) -> None:
    """Make sure each file of ``names`` is in the cache's snapshot folder; download the ones that are not.

    Weight files are refused unless ``weights`` is set (only ``download_weights`` sets it).
    """
    from huggingface_hub import constants

    names = list(dict.fromkeys(names))
    missing = [name for name in names if not (snapshot.directory / name).exists()]
    if not missing:
        return
    if snapshot.from_cache and constants.is_offline_mode():
        state.file = missing[0]
        raise RemoteError(f"HF_HUB_OFFLINE is set and {missing[0]} of {snapshot.repo_id}@{snapshot.requested} is "
                          "not in the local cache")
    for name in missing:
        if not weights and is_weight_file(name):
            raise AssertionError(f"refusing to download weight file {name} for a compatibility check")
    hook = current_hook()  # read here: the pool's worker threads do not inherit this context

    def one(name: str) -> None:
        with naming(name, state):
            _download(snapshot, name, hook)

    if workers <= 1 or len(missing) == 1:
        for name in missing:
            one(name)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(one, name) for name in missing]:
                future.result()


def _download(snapshot: Snapshot, name: str, hook: DownloadHook | None) -> None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.file_download import hf_hub_url

    weight = is_weight_file(name)
    limit = size_limit(name, snapshot.files.get(name), None if weight else size_cap(name))
    bounded = nullcontext() if weight else deadline(hf_hub_url(snapshot.repo_id, name, revision=snapshot.commit))
    with bounded:
        hf_hub_download(snapshot.repo_id, name, revision=snapshot.commit,
                        tqdm_class=_bar_factory(hook, f"{snapshot.repo_id} {name}", limit))


# --- what huggingface_hub reports while it downloads ---------------------------------------------------------------


class _Bar:
    """The tqdm interface huggingface_hub drives during a download (plain HTTP, or the Xet reporter when hf_xet is
    installed). A file's first bar reports to the download hook and holds the download to its size limit; a bar
    without a label only counts."""

    disable = False

    def __init__(self, hook: DownloadHook | None, label: str | None, limit: SizeLimit | None, **kwargs: Any):
        self._n = kwargs.get("initial") or 0
        self._total = kwargs.get("total")
        self._label = label
        self._limit = limit if label is not None else None
        if self._limit is not None:
            self._limit.check_announced(self._total)
        self._hook = hook if label is not None else None
        self._key = new_key()
        self._closed = False
        self._report()

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n(self) -> float:
        return self._n

    @property
    def total(self) -> float | None:
        return self._total

    @total.setter
    def total(self, value: float | None) -> None:
        self._total = value
        self._report()

    def update(self, n: float | None = 1) -> None:
        if n:
            self._n += n
            if self._limit is not None:
                self._limit.check_received(self._n)
            self._report()

    def reset(self, total: float | None = None) -> None:
        self._n = 0
        self.total = total

    def refresh(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_description(self, *args: Any, **kwargs: Any) -> None:
        pass

    set_description_str = set_description

    def clear(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._report()

    def _report(self) -> None:
        if self._hook is not None:
            self._hook(Download(self._key, self._label or "", self._n, self._total, done=self._closed))


def _bar_factory(hook: DownloadHook | None, label: str, limit: SizeLimit | None = None):
    """The ``tqdm_class`` for one file: its first bar reports and is held to ``limit``; any further one (the Xet
    reporter opens a second bar for network bytes) is kept silent, so each file shows once."""
    made: list[_Bar] = []

    def make(*args: Any, **kwargs: Any) -> _Bar:
        bar = _Bar(hook, None if made else label, limit, **kwargs)
        made.append(bar)
        return bar

    return make
