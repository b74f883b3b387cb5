"""Models on the Hugging Face Hub: ``org/name`` or ``org/name@revision``, without downloading weights.

What a comparison needs from a repository is a few megabytes: the tokenizer and config files, and the tensor shapes
in the safetensors headers. This module asks the hub, through huggingface_hub, for:

1. the repository's file list and sizes at the revision, and the commit it resolves to (one API call);
2. the tokenizer, config, generation-config, special-tokens and chat-template files, into the normal Hugging Face
   cache (``hf_hub_download``, pinned to the resolved commit), so a second run reads them from disk and
   ``HF_HUB_OFFLINE=1`` works;
3. the header of each safetensors file, with HTTP range requests: the first 8 KiB, and the rest of the header only
   when it is longer. The body of a response is never read past the bytes asked for, so a server that ignores the
   range costs those bytes and no more.

The header shapes and the file list are kept per commit in the Hugging Face assets cache
(``$HF_HOME/assets/vocabcheck``), which is what lets an offline run or a second run skip the range requests.
``HF_TOKEN``, ``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` mean what they mean to
huggingface_hub. Weights are downloaded only by :func:`download_weights`, which ``vocabcheck run`` calls after a
pair has passed the compatibility check.

Every failure is a :class:`~vocabcheck.errors.VocabcheckError` whose ``where`` is the spec the user typed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import sys
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from .. import atomic
from ..errors import InputError, RemoteError, SourceNotFound, UnsupportedModel, VocabcheckError
from .base import (
    MAX_CHAT_TEMPLATE_BYTES,
    MAX_CONFIG_JSON_BYTES,
    MAX_INDEX_JSON_BYTES,
    MAX_TOKENIZER_JSON_BYTES,
    ModelSource,
    TensorShape,
    env_flag,
    parse_json,
    read_capped,
)
from .checkpoint import MAX_SAFETENSORS_HEADER_BYTES, SAFETENSORS_INDEX, SAFETENSORS_SINGLE, safetensors_shapes
from .local import SLOW_TOKENIZER_FILES, TOKENIZER_JSON, open_directory

COMMIT = re.compile(r"^[0-9a-f]{40}$")
MANIFEST_FORMAT = "vocabcheck.hub-manifest/1"
HEADER_PROBE_BYTES = 8192  # first range request per safetensors file; real headers are 5-60 KB, test headers 3 KB
HEADER_WORKERS = 8
DOWNLOAD_WORKERS = 4
TEKKEN_JSON = "tekken.json"

# What compare/inspect download, with the size each may have (checked against the hub's file list first).
SMALL_FILES: dict[str, int] = {
    TOKENIZER_JSON: MAX_TOKENIZER_JSON_BYTES,
    "tokenizer_config.json": MAX_CONFIG_JSON_BYTES,
    "special_tokens_map.json": MAX_CONFIG_JSON_BYTES,
    "config.json": MAX_CONFIG_JSON_BYTES,
    "generation_config.json": MAX_CONFIG_JSON_BYTES,
    "chat_template.jinja": MAX_CHAT_TEMPLATE_BYTES,
    "chat_template.json": MAX_CHAT_TEMPLATE_BYTES,
}
# Only when the repository has no tokenizer.json: the files transformers converts (and its added tokens).
SLOW_FILES: dict[str, int] = {**{name: MAX_TOKENIZER_JSON_BYTES for name in SLOW_TOKENIZER_FILES},
                              "added_tokens.json": MAX_CONFIG_JSON_BYTES}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx", ".pkl")


@dataclass(frozen=True)
class Snapshot:
    """One commit of a repository: its file list (name -> size), and what the cache already knows about it."""

    repo_id: str
    requested: str
    commit: str
    files: Mapping[str, int | None]
    tensors: Mapping[str, Mapping[str, Any]] | None  # cached safetensors headers: file -> tensor -> [dtype, shape]
    storage: Path
    from_cache: bool
    listed: bool = True  # files is the repository's listing (False: only what a cache folder happens to hold)

    @property
    def directory(self) -> Path:
        return self.storage / "snapshots" / self.commit

    @property
    def uri(self) -> str:
        return f"hf://{self.repo_id}@{self.commit}"


# --- progress -----------------------------------------------------------------------------------------------------

_PROGRESS: ContextVar[tuple[bool, Any] | None] = ContextVar("vocabcheck_hub_progress", default=None)


@contextmanager
def show_progress(enabled: bool, console: Any = None) -> Iterator[None]:
    """Force download progress on or off inside the block (``--json`` turns it off).

    Outside such a block, progress is shown on stderr when stderr is a terminal and ``HF_HUB_DISABLE_PROGRESS_BARS``
    is not set. ``console`` is the rich console to draw on (default: stderr).
    """
    token = _PROGRESS.set((enabled, console))
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _progress_console():
    setting = _PROGRESS.get()
    if setting is not None:
        enabled, console = setting
        if not enabled:
            return None
    else:
        if env_flag("HF_HUB_DISABLE_PROGRESS_BARS") or not sys.stderr.isatty():
            return None
        console = None
    from rich.console import Console

    return console if console is not None else Console(stderr=True)


@contextmanager
def _progress() -> Iterator[Any]:
    """A rich Progress on the chosen console, or ``None`` when progress is off."""
    console = _progress_console()
    if console is None:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as progress:
        yield progress


class _Bar:
    """The tqdm interface huggingface_hub drives during a download (plain HTTP, or the Xet reporter when hf_xet is
    installed), drawn as one rich progress task; a bar without a task draws nothing."""

    disable = False

    def __init__(self, progress: Any, label: str | None, **kwargs: Any):
        self.progress = progress
        self._n = kwargs.get("initial") or 0
        self._total = kwargs.get("total")
        self.task = None
        if progress is not None and label is not None:
            self.task = progress.add_task(label, total=self._total, completed=self._n)

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
        if self.task is not None:
            self.progress.update(self.task, total=value)

    def update(self, n: float | None = 1) -> None:
        if n:
            self._n += n
            if self.task is not None:
                self.progress.update(self.task, completed=self._n)

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
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None


def _bar_factory(progress: Any, label: str):
    """The ``tqdm_class`` for one file: its first bar is drawn; any further one (the Xet reporter opens a second bar
    for network bytes) is kept silent, so each file shows once."""
    made = []

    def make(*args: Any, **kwargs: Any) -> _Bar:
        bar = _Bar(progress, None if made else label, **kwargs)
        made.append(bar)
        return bar

    return make


# --- public entry points ------------------------------------------------------------------------------------------


def parse_spec(spec: str) -> tuple[str, str]:
    """``org/name[@revision]`` -> (repo_id, revision); the revision defaults to ``main``."""
    repo_id, _, revision = spec.partition("@")
    if not revision and spec.endswith("@"):
        raise SourceNotFound("empty revision after '@'", spec)
    if revision and any(part in ("", ".", "..") for part in revision.split("/")):
        raise SourceNotFound(f"not a valid revision: {revision!r}", spec)
    return repo_id, revision or "main"


def open_hub(spec: str, *, read_checkpoint: bool = True) -> ModelSource:
    """Open ``org/name`` or ``org/name@revision``: tokenizer and config files from the cache (downloaded when
    missing), tensor shapes from the safetensors headers. No weight file is downloaded."""
    repo_id, revision = parse_spec(spec)
    with _errors(spec, repo_id, revision) as state, _quiet_hub_logging():
        snapshot = _resolve(repo_id, revision)
        names = _tokenizer_files(snapshot)
        _fetch(snapshot, names, state)
        tensors = description = None
        if read_checkpoint:
            tensors, description, snapshot = _tensor_shapes(snapshot, state)
        _save_manifest(snapshot)
    directory = snapshot.directory
    try:
        if TEKKEN_JSON in names and TOKENIZER_JSON not in names:
            from .raw import open_tekken

            source = open_tekken(directory / TEKKEN_JSON, spec)
            source = replace(source, config=_read_optional_json(directory / "config.json"),
                             generation_config=_read_optional_json(directory / "generation_config.json"))
        else:
            source = open_directory(directory, spec, read_checkpoint=False)
    except VocabcheckError as exc:  # name the file on the hub, not its path in the cache
        exc.where = _hub_provenance(exc.where, directory, snapshot) if exc.where else spec
        raise
    provenance = {fact: _hub_provenance(text, directory, snapshot) for fact, text in source.provenance.items()}
    if tensors is not None:
        provenance["tensors"] = f"{snapshot.uri}/{description}"
    return replace(source, kind="hub", location=snapshot.uri, revision=snapshot.commit, tensors=tensors,
                   provenance=provenance, weights=())


def download_weights(spec: str) -> Path:
    """Download the safetensors weights of ``org/name[@revision]`` (with its config and tokenizer files) into the
    Hugging Face cache and return the snapshot directory, a complete local model directory.

    ``vocabcheck run`` and ``bench`` call this only after the pair has passed the compatibility check, so an
    incompatible pair costs no weight download. Only safetensors are fetched, never pickled ``.bin`` weights.
    """
    repo_id, revision = parse_spec(spec)
    with _errors(spec, repo_id, revision) as state, _quiet_hub_logging():
        snapshot = _resolve(repo_id, revision)
        names = _tokenizer_files(snapshot)
        if SAFETENSORS_INDEX in snapshot.files:
            _fetch(snapshot, [SAFETENSORS_INDEX], state)
        weights = _checkpoint_files(snapshot)
        if not weights:
            raise UnsupportedModel("the repository has no safetensors weights (vocabcheck downloads safetensors "
                                   "only, never pickled .bin files)", spec)
        _fetch(snapshot, [*names, *weights], state, weights=True, workers=DOWNLOAD_WORKERS)
        _save_manifest(snapshot)
    return snapshot.directory


# --- resolving a revision -----------------------------------------------------------------------------------------


def _hub():
    from huggingface_hub import constants

    return constants


def _storage(repo_id: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return Path(_hub().HF_HUB_CACHE).expanduser() / repo_folder_name(repo_id=repo_id, repo_type="model")


def _manifest_path(repo_id: str, commit: str) -> Path:
    from huggingface_hub import cached_assets_path
    from huggingface_hub.file_download import repo_folder_name

    # assets_dir is passed because huggingface_hub binds its default when it is imported
    folder = cached_assets_path(library_name="vocabcheck",
                                namespace=repo_folder_name(repo_id=repo_id, repo_type="model"),
                                subfolder="manifests", assets_dir=_hub().HF_ASSETS_CACHE)
    return folder / f"{commit}.json"


def _load_manifest(repo_id: str, commit: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_manifest_path(repo_id, commit).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent, unreadable, or an assets folder that cannot be created
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or data.get("commit") != commit \
            or not isinstance(data.get("files"), dict):
        return None
    return data


def _save_manifest(snapshot: Snapshot) -> None:
    if not snapshot.listed:
        return
    data = {"format": MANIFEST_FORMAT, "repo_id": snapshot.repo_id, "commit": snapshot.commit,
            "files": dict(snapshot.files), "tensors": snapshot.tensors}
    try:
        path = _manifest_path(snapshot.repo_id, snapshot.commit)
        if path.is_file() and _load_manifest(snapshot.repo_id, snapshot.commit) == data:
            return
        atomic.write_text(path, json.dumps(data, sort_keys=True))
    except (OSError, ValueError):
        pass  # a read-only cache still works online; it only costs the requests again next time


def _resolve(repo_id: str, revision: str) -> Snapshot:
    """The commit ``revision`` names and the repository's files there: from the hub, or from the cache when
    offline (``HF_HUB_OFFLINE``) or when the hub cannot be reached."""
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    constants = _hub()
    storage = _storage(repo_id)
    if constants.is_offline_mode():
        return _cached_snapshot(repo_id, revision, storage, "HF_HUB_OFFLINE is set")
    if COMMIT.match(revision):  # a commit never changes: what the cache holds for it is all there is to know
        manifest = _load_manifest(repo_id, revision)
        if manifest is not None:
            return Snapshot(repo_id, revision, revision, manifest["files"], manifest.get("tensors"), storage,
                            from_cache=True)
    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True,
                                  timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT)
    except (httpx2.TransportError, OfflineModeIsEnabled) as exc:
        if isinstance(exc, httpx2.ProxyError):
            raise
        return _cached_snapshot(repo_id, revision, storage, f"cannot reach the hub at {constants.ENDPOINT} "
                                                            f"({_reason(exc)})")
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status < 500:
            raise
        return _cached_snapshot(repo_id, revision, storage, f"the hub at {constants.ENDPOINT} answered HTTP "
                                                            f"{status} (server error)")
    commit = info.sha
    if not isinstance(commit, str) or not COMMIT.match(commit):
        raise RemoteError(f"the hub at {constants.ENDPOINT} gave no commit for revision {revision!r}")
    files: dict[str, int | None] = {}
    for sibling in info.siblings or ():
        size = sibling.lfs.size if sibling.lfs is not None else sibling.size
        files[sibling.rfilename] = size if type(size) is int else None
    _remember_ref(storage, revision, commit)
    manifest = _load_manifest(repo_id, commit)
    tensors = manifest.get("tensors") if manifest and manifest["files"] == files else None
    return Snapshot(repo_id, revision, commit, files, tensors, storage, from_cache=False)


def _cached_snapshot(repo_id: str, revision: str, storage: Path, why: str) -> Snapshot:
    commit = revision if COMMIT.match(revision) else None
    if commit is None:
        ref = storage / "refs" / revision
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except OSError:
            commit = None
    if commit is None or not COMMIT.match(commit):
        raise RemoteError(f"{why}, and {repo_id}@{revision} is not in the local cache")
    manifest = _load_manifest(repo_id, commit)
    if manifest is not None:
        return Snapshot(repo_id, revision, commit, manifest["files"], manifest.get("tensors"), storage,
                        from_cache=True)
    # no vocabcheck manifest, but another tool (transformers, `hf download`) may have filled the snapshot folder:
    # what it holds is what there is
    directory = storage / "snapshots" / commit
    files = {}
    if directory.is_dir():
        files = {path.name: path.stat().st_size for path in directory.iterdir() if path.is_file()}
    if not files:
        raise RemoteError(f"{why}, and {repo_id}@{revision} is not in the local cache")
    return Snapshot(repo_id, revision, commit, files, None, storage, from_cache=True, listed=False)


def _remember_ref(storage: Path, revision: str, commit: str) -> None:
    """Record ``revision -> commit`` in the cache's ``refs/`` folder, as huggingface_hub does, so an offline run can
    resolve ``main`` (or a tag) to the commit whose files are cached."""
    if revision == commit:
        return
    parts = PurePosixPath(revision).parts
    if not parts or any(part in ("", ".", "..") for part in parts):
        return
    path = storage.joinpath("refs", *parts)
    try:
        if path.is_file() and path.read_text(encoding="utf-8") == commit:
            return
        atomic.write_text(path, commit)
    except OSError:
        pass


# --- which files --------------------------------------------------------------------------------------------------


def _tokenizer_files(snapshot: Snapshot) -> list[str]:
    files = snapshot.files
    wanted = dict(SMALL_FILES)
    if TOKENIZER_JSON not in files:
        wanted.update(SLOW_FILES)
        if not any(name in files for name in SLOW_TOKENIZER_FILES):
            wanted[TEKKEN_JSON] = MAX_TOKENIZER_JSON_BYTES
    names = [name for name in wanted if name in files]
    if not any(name in names for name in (TOKENIZER_JSON, TEKKEN_JSON, *SLOW_TOKENIZER_FILES)):
        weights = [n for n in files if n.lower().endswith(".gguf")]
        hint = " (it holds GGUF files: download one and pass its path)" if weights else ""
        raise SourceNotFound(f"{snapshot.uri} has no tokenizer: no tokenizer.json, tokenizer.model, vocab.json, "
                             f"vocab.txt or tekken.json{hint}")
    for name in names:
        size = files.get(name)
        if size is not None and size > wanted[name]:
            raise InputError(f"{name} is {size:,} bytes on the hub, over the {wanted[name]:,}-byte limit")
    return names


def _checkpoint_files(snapshot: Snapshot) -> list[str]:
    """The safetensors files of the checkpoint, in the order transformers prefers (index, single file, any)."""
    files = snapshot.files
    if SAFETENSORS_INDEX in files:
        index = snapshot.directory / SAFETENSORS_INDEX
        data = parse_json(read_capped(index, MAX_INDEX_JSON_BYTES, "checkpoint index"), index, "checkpoint index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map \
                or not all(isinstance(v, str) for v in weight_map.values()):
            raise InputError(f"{SAFETENSORS_INDEX} has no 'weight_map' mapping tensor names to file names")
        names = sorted(set(weight_map.values()))
        for name in names:
            if not _safe_name(name):
                raise InputError(f"{SAFETENSORS_INDEX} names a file outside the repository: {name!r}")
            if name not in files:
                raise SourceNotFound(f"shard {name} named by {SAFETENSORS_INDEX} is not in the repository")
        return names
    if SAFETENSORS_SINGLE in files:
        return [SAFETENSORS_SINGLE]
    return sorted(n for n in files if n.endswith(".safetensors") and "/" not in n and not n.startswith("adapter"))


def _safe_name(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and "\\" not in name and "\x00" not in name and not path.is_absolute() \
        and ".." not in path.parts


# --- downloads ----------------------------------------------------------------------------------------------------


class _State:
    """What is being fetched when something goes wrong, for the error message."""

    def __init__(self) -> None:
        self.file: str | None = None


@contextmanager
def _naming(name: str, state: _State) -> Iterator[None]:
    """Record ``name`` as the file an error is about (also when it happens in a worker thread)."""
    state.file = name
    try:
        yield
    except BaseException as exc:
        exc.vocabcheck_file = name  # type: ignore[attr-defined]
        raise


def _fetch(snapshot: Snapshot, names: Iterable[str], state: _State, *, weights: bool = False,
           workers: int = 1) -> None:
    """Make sure each file of ``names`` is in the cache's snapshot folder; download the ones that are not.

    Weight files are refused unless ``weights`` is set (only :func:`download_weights` sets it).
    """
    from huggingface_hub import hf_hub_download

    names = list(dict.fromkeys(names))
    missing = [name for name in names if not (snapshot.directory / name).exists()]
    if not missing:
        return
    if snapshot.from_cache and _hub().is_offline_mode():
        state.file = missing[0]
        raise RemoteError(f"HF_HUB_OFFLINE is set and {missing[0]} of {snapshot.repo_id}@{snapshot.requested} is "
                          "not in the local cache")
    for name in missing:
        if not weights and name.lower().endswith(WEIGHT_SUFFIXES):
            raise AssertionError(f"refusing to download weight file {name} for a compatibility check")

    with _progress() as progress:
        def one(name: str) -> None:
            with _naming(name, state):
                hf_hub_download(snapshot.repo_id, name, revision=snapshot.commit,
                                tqdm_class=_bar_factory(progress, f"{snapshot.repo_id} {name}"))

        if workers <= 1 or len(missing) == 1:
            for name in missing:
                one(name)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for future in [pool.submit(one, name) for name in missing]:
                    future.result()


# --- safetensors headers by range request -------------------------------------------------------------------------


def _tensor_shapes(snapshot: Snapshot, state: _State) -> tuple[dict[str, TensorShape] | None, str | None, Snapshot]:
    files = snapshot.files
    if SAFETENSORS_INDEX in files:
        _fetch(snapshot, [SAFETENSORS_INDEX], state)
    names = _checkpoint_files(snapshot)
    if not names:
        return None, None, snapshot  # no safetensors (a .bin or GGUF-only repository): rows come from config.json
    cached = snapshot.tensors or {}
    headers: dict[str, Mapping[str, Any]] = {name: cached[name] for name in names if isinstance(cached.get(name),
                                                                                                dict)}
    for name in names:
        local = snapshot.directory / name
        if name not in headers and local.is_file():  # the whole file is in the cache (weights were downloaded)
            headers[name] = {t.name: [t.dtype, list(t.shape)] for t in safetensors_shapes(local).values()}
    todo = [name for name in names if name not in headers]
    if todo:
        if snapshot.from_cache and _hub().is_offline_mode():
            raise RemoteError(f"HF_HUB_OFFLINE is set and the safetensors headers of "
                              f"{snapshot.repo_id}@{snapshot.requested} are not in the local cache")
        from huggingface_hub.file_download import hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        request_headers = build_hf_headers()

        def read(name: str) -> tuple[str, dict[str, Any]]:
            with _naming(name, state):
                url = hf_hub_url(snapshot.repo_id, name, revision=snapshot.commit)
                return name, _remote_header(url, name, files.get(name), request_headers)

        with ThreadPoolExecutor(max_workers=min(HEADER_WORKERS, len(todo))) as pool:
            headers.update(dict(pool.map(read, todo)))
    tensors: dict[str, TensorShape] = {}
    for name in names:
        for tensor, (dtype, shape) in headers[name].items():
            tensors[tensor] = TensorShape(name=tensor, shape=tuple(shape), dtype=dtype, file=name)
    if SAFETENSORS_INDEX in files:
        description = f"{SAFETENSORS_INDEX} ({len(names)} shards, headers by range request)"
    else:
        description = f"{', '.join(names)} (header{'s' if len(names) > 1 else ''} by range request)"
    snapshot = replace(snapshot, tensors={**cached, **{name: headers[name] for name in names}})
    return tensors, description, snapshot


def _remote_header(url: str, name: str, size: int | None, headers: Mapping[str, str]) -> dict[str, Any]:
    """Tensor name -> [dtype, shape] from one remote safetensors file, read with range requests."""
    first = _get_range(url, 0, HEADER_PROBE_BYTES - 1, headers, name)
    if len(first) < 8:
        raise InputError(f"{name} is not a safetensors file: shorter than its 8-byte header length")
    (length,) = struct.unpack("<Q", first[:8])
    if length > MAX_SAFETENSORS_HEADER_BYTES:
        raise InputError(f"{name}: safetensors header of {length:,} bytes is over the "
                         f"{MAX_SAFETENSORS_HEADER_BYTES:,}-byte limit")
    if size is not None and length > size - 8:
        raise InputError(f"{name}: safetensors header claims {length:,} bytes but the file has {size:,}")
    data = first[8:8 + length]
    if len(data) < length:
        rest = _get_range(url, len(first), 8 + length - 1, headers, name)
        data = data + rest
        if len(data) != length:
            raise RemoteError(f"{name}: the server sent {len(data):,} of the {length:,} header bytes")
    return _parse_header(data, name, None if size is None else size - 8 - length)


def _get_range(url: str, start: int, end: int, headers: Mapping[str, str], name: str) -> bytes:
    """Bytes ``start..end`` (inclusive) of ``url``; never reads more of the body than that, whatever the server."""
    import httpx2
    from huggingface_hub.utils import get_session, hf_raise_for_status

    want = end - start + 1
    request_headers = {**headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
    with get_session().stream("GET", url, headers=request_headers,
                              timeout=_hub().HF_HUB_DOWNLOAD_TIMEOUT) as response:
        if response.status_code >= 400:
            body = _read_at_most(response, 64 * 1024)
            hf_raise_for_status(httpx2.Response(response.status_code, headers=response.headers, content=body,
                                                request=response.request))
        if response.status_code == 200 and start > 0:
            raise RemoteError(f"{name}: the server ignored the byte range of a header request")
        return _read_at_most(response, want)


def _read_at_most(response: Any, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk[:limit - got])
        got += len(chunks[-1])
        if got >= limit:
            break
    return b"".join(chunks)


def _parse_header(data: bytes, name: str, data_bytes: int | None) -> dict[str, Any]:
    header = parse_json(data, name, "safetensors header")
    if not isinstance(header, dict):
        raise InputError(f"{name}: safetensors header is not a JSON object")
    tensors: dict[str, Any] = {}
    for tensor, info in header.items():
        if tensor == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise InputError(f"{name}: safetensors header entry {tensor!r} is not an object")
        shape, dtype, offsets = info.get("shape"), info.get("dtype"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise InputError(f"{name}: safetensors header gives tensor {tensor!r} an invalid shape {shape!r}")
        if not isinstance(dtype, str):
            raise InputError(f"{name}: safetensors header gives tensor {tensor!r} an invalid dtype")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1] and (data_bytes is None or offsets[1] <= data_bytes)):
            raise InputError(f"{name}: safetensors header places tensor {tensor!r} at bytes {offsets!r}, outside "
                             "the file")
        tensors[tensor] = [dtype, shape]
    return tensors


# --- errors, logging, provenance ----------------------------------------------------------------------------------


@contextmanager
def _errors(spec: str, repo_id: str, revision: str) -> Iterator[_State]:
    """Turn every huggingface_hub and network failure into one VocabcheckError about ``spec``."""
    import httpx2
    from huggingface_hub import errors as hub_errors

    endpoint = _hub().ENDPOINT
    state = _State()
    try:
        try:
            yield state
        except BaseException as exc:
            state.file = getattr(exc, "vocabcheck_file", None) or state.file
            raise
    except VocabcheckError as exc:
        cache = str(Path(_hub().HF_HUB_CACHE).expanduser())
        if exc.where is not None and exc.where.startswith(cache):  # a cached file: name it, not its cache path
            exc.problem = f"{Path(exc.where).name}: {exc.problem}"
            exc.args = (exc.problem,)
            exc.where = None
        if exc.where is None:
            exc.where = spec
        raise
    except hub_errors.HFValidationError as exc:
        raise SourceNotFound(f"not a valid hub repository id: {_reason(exc)}", spec) from exc
    except hub_errors.GatedRepoError as exc:
        raise RemoteError(f"gated repository: your token has no access (accept the conditions at "
                          f"{endpoint}/{repo_id}, then set HF_TOKEN or run `hf auth login`)", spec) from exc
    except hub_errors.RepositoryNotFoundError as exc:
        raise SourceNotFound(f"repository not found on {endpoint} (if it is private, set HF_TOKEN or run "
                             "`hf auth login`)", spec) from exc
    except hub_errors.RevisionNotFoundError as exc:
        raise SourceNotFound(f"revision {revision!r} not found in {repo_id}", spec) from exc
    except hub_errors.RemoteEntryNotFoundError as exc:
        raise SourceNotFound(f"{state.file or 'a file'} not found in {repo_id}@{revision}", spec) from exc
    except hub_errors.DisabledRepoError as exc:
        raise RemoteError("access to this repository is disabled on the hub", spec) from exc
    except (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled) as exc:
        raise RemoteError(f"{state.file or 'a file'} of {repo_id}@{revision} is not in the local cache and the hub "
                          f"cannot be used ({_offline_reason(exc)})", spec) from exc
    except hub_errors.FileMetadataError as exc:
        raise RemoteError(f"{endpoint} does not answer like a Hugging Face hub ({_reason(exc)}); check HF_ENDPOINT",
                          spec) from exc
    except hub_errors.HfHubHTTPError as exc:
        response = exc.response
        status = response.status_code if response is not None else 0
        if status == 401:
            problem = "the hub rejected the token (HF_TOKEN): invalid credentials"
        elif status >= 500:
            problem = f"the hub at {endpoint} answered HTTP {status} (server error); try again later"
        else:
            problem = f"the hub at {endpoint} answered HTTP {status}"
        if state.file:
            problem += f" for {state.file}"
        raise RemoteError(problem, spec) from exc
    except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.ReadTimeout) as exc:
        what = f"downloading {state.file}" if state.file else f"talking to {endpoint}"
        raise RemoteError(f"the connection broke while {what} ({_reason(exc)})", spec) from exc
    except httpx2.TransportError as exc:
        raise RemoteError(f"cannot reach the hub at {endpoint} ({_reason(exc)})", spec) from exc
    except OSError as exc:
        text = _reason(exc)
        match = re.search(r"should be of size (\d+) but has size (\d+)", text)
        if match:
            raise RemoteError(f"download of {state.file or 'a file'} was incomplete: the hub announced "
                              f"{int(match[1]):,} bytes and sent {int(match[2]):,}", spec) from exc
        raise InputError(f"cannot write to the Hugging Face cache {_hub().HF_HUB_CACHE}: {text}", spec) from exc


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__)[:300]


def _offline_reason(exc: BaseException) -> str:
    if _hub().is_offline_mode():
        return "HF_HUB_OFFLINE is set"
    cause = exc.__cause__ or exc.__context__
    return _reason(cause) if cause is not None else _reason(exc)


@contextmanager
def _quiet_hub_logging() -> Iterator[None]:
    """huggingface_hub logs retries and cache fallbacks as warnings on stderr; vocabcheck reports failures itself,
    as one line. ``HF_HUB_VERBOSITY`` set by the user wins."""
    if os.environ.get("HF_HUB_VERBOSITY"):
        yield
        return
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _hub_provenance(text: str, directory: Path, snapshot: Snapshot) -> str:
    """A provenance string that names the hub file at its commit instead of the cache path."""
    return text.replace(str(directory), snapshot.uri)


def _read_optional_json(path: Path) -> dict[str, Any] | None:
    from .base import read_json_object

    return read_json_object(path, MAX_CONFIG_JSON_BYTES, path.name) if path.is_file() else None
