"""Which commit a revision names and which files it has: from the hub, or from the Hugging Face cache.

The file list and the safetensors header shapes of each commit are kept as a manifest in the Hugging Face assets cache
(``$HF_HOME/assets/vocabcheck``): that is what lets an offline run, or a second run, skip the hub's API and the range
requests. The branch or tag a commit was reached by is recorded in the cache's ``refs/`` folder, as huggingface_hub
does, so ``HF_HUB_OFFLINE=1`` resolves ``main`` too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ... import atomic
from ...errors import RemoteError
from .failures import reason
from .listing import COMMIT, fetch_listing
from .transport import HubDeadline

MANIFEST_FORMAT = "vocabcheck.hub-manifest/1"


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


def storage_folder(repo_id: str) -> Path:
    """The repository's folder in the Hugging Face cache (``models--org--name``)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return Path(constants.HF_HUB_CACHE).expanduser() / repo_folder_name(repo_id=repo_id, repo_type="model")


def resolve(repo_id: str, revision: str) -> Snapshot:
    """The commit ``revision`` names and the repository's files there: from the hub, or from the cache when offline
    (``HF_HUB_OFFLINE``) or when the hub cannot be reached, answers with a server error or runs out of time."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    storage = storage_folder(repo_id)
    if constants.is_offline_mode():
        return _cached_snapshot(repo_id, revision, storage, "HF_HUB_OFFLINE is set")
    if COMMIT.match(revision):  # a commit never changes: what the cache holds for it is all there is to know
        manifest = _load_manifest(repo_id, revision)
        if manifest is not None:
            return Snapshot(repo_id, revision, revision, manifest["files"], manifest.get("tensors"), storage,
                            from_cache=True)
    try:
        listing = fetch_listing(repo_id, revision)
    except HubDeadline as exc:
        return _cached_snapshot(repo_id, revision, storage, str(exc))
    except (httpx2.TransportError, OfflineModeIsEnabled) as exc:
        if isinstance(exc, httpx2.ProxyError):
            raise
        return _cached_snapshot(repo_id, revision, storage, f"cannot reach the hub at {constants.ENDPOINT} "
                                                            f"({reason(exc)})")
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status < 500:
            raise
        return _cached_snapshot(repo_id, revision, storage, f"the hub at {constants.ENDPOINT} answered HTTP "
                                                            f"{status} (server error)")
    _remember_ref(storage, revision, listing.commit)
    manifest = _load_manifest(repo_id, listing.commit)
    tensors = manifest.get("tensors") if manifest and manifest["files"] == listing.files else None
    return Snapshot(repo_id, revision, listing.commit, listing.files, tensors, storage, from_cache=False)


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


# --- the manifest -------------------------------------------------------------------------------------------------


def _manifest_path(repo_id: str, commit: str) -> Path:
    from huggingface_hub import cached_assets_path, constants
    from huggingface_hub.file_download import repo_folder_name

    # assets_dir is passed because huggingface_hub binds its default when it is imported
    folder = cached_assets_path(library_name="vocabcheck",
                                namespace=repo_folder_name(repo_id=repo_id, repo_type="model"),
                                subfolder="manifests", assets_dir=constants.HF_ASSETS_CACHE)
    return folder / f"{commit}.json"


def _load_manifest(repo_id: str, commit: str) -> dict[str, Any] | None:
    """The manifest of ``commit``, or ``None`` when there is none or it is not one this version wrote."""
    try:
        data = json.loads(_manifest_path(repo_id, commit).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # absent, unreadable, or an assets folder that cannot be created
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or data.get("commit") != commit \
            or not _file_sizes(data.get("files")):
        return None
    if not _header_tables(data.get("tensors")):
        data["tensors"] = None  # read the headers again rather than trust a table of the wrong shape
    return data


def _file_sizes(files: Any) -> bool:
    return isinstance(files, dict) and all(size is None or type(size) is int for size in files.values())


def _header_tables(tensors: Any) -> bool:
    """Whether ``tensors`` is a manifest's header table: file -> tensor -> [dtype, shape]."""
    if tensors is None:
        return True
    return isinstance(tensors, dict) and all(
        isinstance(table, dict) and all(
            isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], list)
            and all(type(dim) is int for dim in entry[1]) for entry in table.values())
        for table in tensors.values())


def save_manifest(snapshot: Snapshot) -> None:
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
