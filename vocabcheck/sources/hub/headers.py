"""Tensor shapes of a hub checkpoint from its safetensors headers, read with HTTP range requests.

Per safetensors file: the first 8 KiB, and the rest of the header only when it is longer. The body of an answer is
never read past the bytes asked for, so a server that ignores the range costs those bytes and no more. Each header is
checked by the same parser as a local file's (:func:`..checkpoint.parse_safetensors_header`), against the file size
the server gives (``Content-Range``) or, failing that, the hub's file list.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ...errors import RemoteError
from ..base import TensorShape
from ..checkpoint import SAFETENSORS_INDEX, parse_safetensors_header, safetensors_header_length, safetensors_shapes
from .download import fetch
from .failures import State, naming
from .files import checkpoint_files
from .snapshot import Snapshot
from .transport import deadline, get_range

HEADER_PROBE_BYTES = 8192  # first range request per safetensors file; real headers are 5-60 KB, test headers 3 KB
HEADER_WORKERS = 8

Table = dict[str, list[Any]]  # a header as the manifest keeps it: tensor -> [dtype, shape]


def tensor_shapes(snapshot: Snapshot, state: State) -> tuple[dict[str, TensorShape] | None, str | None, Snapshot]:
    """The tensors of the checkpoint, a description of where they were read, and the snapshot with the headers added
    (for the manifest); ``None`` when the repository has no safetensors (rows then come from config.json)."""
    from huggingface_hub import constants

    if SAFETENSORS_INDEX in snapshot.files:
        fetch(snapshot, [SAFETENSORS_INDEX], state)
    names = checkpoint_files(snapshot)
    if not names:
        return None, None, snapshot
    tables = _known_tables(snapshot, names)
    todo = [name for name in names if name not in tables]
    if todo:
        if snapshot.from_cache and constants.is_offline_mode():
            raise RemoteError(f"HF_HUB_OFFLINE is set and the safetensors headers of "
                              f"{snapshot.repo_id}@{snapshot.requested} are not in the local cache")
        tables.update(_remote_tables(snapshot, todo, state))
    tensors: dict[str, TensorShape] = {}
    for name in names:
        for tensor, (dtype, shape) in tables[name].items():
            tensors[tensor] = TensorShape(name=tensor, shape=tuple(shape), dtype=dtype, file=name)
    if SAFETENSORS_INDEX in snapshot.files:
        description = f"{SAFETENSORS_INDEX} ({len(names)} shards, headers by range request)"
    else:
        description = f"{', '.join(names)} (header{'s' if len(names) > 1 else ''} by range request)"
    snapshot = replace(snapshot, tensors={**(snapshot.tensors or {}), **{name: tables[name] for name in names}})
    return tensors, description, snapshot


def _known_tables(snapshot: Snapshot, names: list[str]) -> dict[str, Table]:
    """The headers the manifest holds, or that whole files in the cache give (weights downloaded earlier)."""
    cached = snapshot.tensors or {}
    tables: dict[str, Table] = {name: dict(cached[name]) for name in names if isinstance(cached.get(name), dict)}
    for name in names:
        local = snapshot.directory / name
        if name not in tables and local.is_file():
            tables[name] = _table(safetensors_shapes(local))
    return tables


def _remote_tables(snapshot: Snapshot, names: list[str], state: State) -> dict[str, Table]:
    from huggingface_hub.utils import build_hf_headers

    request_headers = build_hf_headers()

    def read(name: str) -> tuple[str, Table]:
        with naming(name, state):
            return name, _table(remote_header(snapshot, name, request_headers))

    with ThreadPoolExecutor(max_workers=min(HEADER_WORKERS, len(names))) as pool:
        return dict(pool.map(read, names))


def remote_header(snapshot: Snapshot, name: str, request_headers: Mapping[str, str]) -> dict[str, TensorShape]:
    """The tensors in the header of the safetensors file ``name``, read with one or two range requests."""
    from huggingface_hub.file_download import hf_hub_url

    url = hf_hub_url(snapshot.repo_id, name, revision=snapshot.commit)
    uri = f"{snapshot.uri}/{name}"
    with deadline(url):
        first, size = get_range(url, 0, HEADER_PROBE_BYTES - 1, request_headers, name)
    size = _file_size(size, snapshot.files.get(name), uri)
    length = safetensors_header_length(first, size, uri)
    data = first[8:8 + length]
    if len(data) < length:
        with deadline(url):
            rest, _ = get_range(url, len(first), 8 + length - 1, request_headers, name)
        data += rest
        if len(data) != length:
            raise RemoteError(f"{name}: the server sent {len(data):,} of the {length:,} header bytes")
    return parse_safetensors_header(data, size, name, uri)


def _file_size(served: int | None, listed: int | None, uri: str) -> int | None:
    """The file's size: as the server gives it, which must agree with the hub's file list."""
    if served is not None and listed is not None and served != listed:
        raise RemoteError(f"the server gives the file {served:,} bytes, the hub's file list {listed:,}", uri)
    return served if served is not None else listed


def _table(shapes: Mapping[str, TensorShape]) -> Table:
    return {shape.name: [shape.dtype, list(shape.shape)] for shape in shapes.values()}
