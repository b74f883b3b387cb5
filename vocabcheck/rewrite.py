"""The streaming rewrite behind ``vocabcheck align``: copy a safetensors checkpoint shard by shard, giving named
matrices a new row count, in bounded memory.

Tensors are streamed through ``safetensors.safe_open`` (memory-mapped, read lazily) and ``save_file`` one shard at
a time. A resized matrix is built in a new buffer from chunks read through short-lived mappings, so its source pages
do not stay resident. The peak resident memory of the rewrite above the process's baseline is at most

    largest shard + rows added (bytes) + one chunk (``chunk_bytes``, 64 MiB) + MEMORY_SLACK_BYTES (32 MiB)

whatever the size of the model (``tests/test_align.py`` measures it; ``reports/align.md`` has the figures).

A resized matrix is allocated whole, so its size is checked before anything is allocated
(:func:`check_allocation`): at most ``MAX_ROWS`` rows, and no more bytes (rows × hidden × dtype width) than the memory
available. A target whose ``config.json`` says ``vocab_size = 10**18``, or a sparse safetensors file that claims
2³⁶ rows, is one line and exit code 2, not an attempt to allocate terabytes.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import atomic
from .errors import InputError, UnsupportedModel

CHUNK_BYTES = 64 * 1024 * 1024
MEMORY_SLACK_BYTES = 32 * 1024 * 1024
# 64 times the largest vocabularies published (262,144 rows): more rows than this is not a vocabulary
MAX_ROWS = 1 << 24


def check_allocation(matrices: Iterable[tuple[int, int, str]], where: str | Path, source: str = "") -> None:
    """Refuse, before allocating them, new matrices of ``(rows, hidden, safetensors dtype)`` that have more than
    ``MAX_ROWS`` rows or that together need more bytes than the memory available (exit code 2, naming ``where``;
    ``source`` says where the row count comes from)."""
    matrices = list(matrices)
    for rows, hidden, dtype in matrices:
        if rows > MAX_ROWS:
            raise InputError(f"{rows:,} rows{source}: align refuses to build a matrix of more than {MAX_ROWS:,} rows "
                             "(the largest vocabularies have about 262,144)", where)
    need = sum(rows * hidden * itemsize(dtype) for rows, hidden, dtype in matrices)
    free = available_memory()
    if free is not None and need > free:
        shapes = ", ".join(f"{rows:,} × {hidden:,} {dtype}" for rows, hidden, dtype in matrices)
        raise InputError(f"{matrices[0][0]:,} rows{source}: align would allocate {_bytes(need)} for the resized "
                         f"matrices ({shapes}) and {_bytes(max(free, 0))} of memory is available", where)


def _bytes(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def available_memory() -> int | None:
    """Bytes of memory a new allocation can get: MemAvailable plus free swap (Linux), within the cgroup's limit when
    there is one; free physical pages elsewhere; ``None`` when the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            info = {key: int(value.split()[0]) * 1024 for key, value in
                    (line.split(":", 1) for line in handle if ":" in line)}
        free = info["MemAvailable"] + info.get("SwapFree", 0)
    except (OSError, KeyError, ValueError, IndexError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            return None
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text(encoding="ascii").strip()
        if limit.isdigit():
            free = min(free, int(limit) - int((cgroup / "memory.current").read_text(encoding="ascii")))
    except (OSError, ValueError):
        pass
    return free


def itemsize(dtype: str) -> int:
    """Bytes per value of a safetensors dtype ("F32", "BF16", "I8"...)."""
    digits = "".join(c for c in dtype if c.isdigit())
    if dtype.upper() in ("BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2"):
        return 1
    return max(1, int(digits) // 8) if digits else 4


@dataclass(frozen=True)
class ShardReport:
    file: str
    tensors: int
    bytes: int  # tensor data bytes written
    parameters: int
    resized: tuple[str, ...]


def rewrite_checkpoint(draft_dir: Path, shards: tuple[str, ...], index: str | None, out_dir: Path,
                       rows: Mapping[str, int], *, chunk_bytes: int = CHUNK_BYTES) -> list[ShardReport]:
    """Rewrite every shard (same file names) and, when there is one, the shard index."""
    reports = []
    for name in shards:
        dst = out_dir / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        reports.append(rewrite_shard(draft_dir / name, dst, rows, chunk_bytes=chunk_bytes))
    if index is not None:
        source = json.loads((draft_dir / index).read_text(encoding="utf-8"))
        written = _written_names(out_dir, shards)
        source["weight_map"] = dict(sorted(written.items()))
        metadata = dict(source.get("metadata") or {})
        metadata["total_size"] = sum(r.bytes for r in reports)
        if "total_parameters" in metadata:
            metadata["total_parameters"] = sum(r.parameters for r in reports)
        source["metadata"] = metadata
        atomic.write_text(out_dir / index, json.dumps(source, indent=2) + "\n")
    return reports


def _written_names(out_dir: Path, shards: tuple[str, ...]) -> dict[str, str]:
    from safetensors import safe_open

    names: dict[str, str] = {}
    for shard in shards:
        with safe_open(str(out_dir / shard), framework="pt") as f:
            names.update({key: shard for key in f.keys()})
    return names


def rewrite_shard(src: Path, dst: Path, rows: Mapping[str, int], *, chunk_bytes: int = CHUNK_BYTES) -> ShardReport:
    """Copy one safetensors file, giving each tensor named in ``rows`` that many rows.

    Other tensors are memory-mapped and written as they are (same bytes, same dtype); the metadata is kept. A source
    that cannot be read is an :class:`InputError` naming ``src``; a destination that cannot be written (a full disk)
    is an :class:`OSError` naming ``dst``.
    """
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file

    def write(tensors, metadata) -> None:
        try:
            save_file(tensors, str(dst), metadata=metadata)
        except SafetensorError as exc:  # "Error while serializing: I/O error: No space left on device (os error 28)"
            code = re.search(r"os error (\d+)", str(exc))
            number = int(code.group(1)) if code else errno.EIO
            raise OSError(number, os.strerror(number) if code else str(exc), str(dst)) from exc

    try:
        return _rewrite_shard(src, dst, rows, chunk_bytes, safe_open, write)
    except SafetensorError as exc:
        raise InputError(f"cannot read safetensors file: {exc}", src) from exc


def _rewrite_shard(src: Path, dst: Path, rows: Mapping[str, int], chunk_bytes: int, safe_open, write):
    resized = []
    with safe_open(str(src), framework="pt") as f:
        metadata = dict(f.metadata() or {})
        metadata.setdefault("format", "pt")
        tensors = {}
        for name in f.keys():
            if name in rows:
                tensors[name] = _resized(src, name, rows[name], chunk_bytes)
                resized.append(name)
            else:
                tensors[name] = f.get_tensor(name)
        write(tensors, metadata)
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        parameters = sum(t.numel() for t in tensors.values())
        count = len(tensors)
        del tensors
    return ShardReport(file=dst.name, tensors=count, bytes=size, parameters=parameters, resized=tuple(resized))


def _resized(src: Path, name: str, rows: int, chunk_bytes: int):
    """A new [rows, hidden] tensor: the source's rows copied bit for bit, then zero rows.

    The source is read in chunks, each through a mapping that is closed at once, so at most one chunk of the old
    matrix is resident next to the new one.
    """
    import torch
    from safetensors import safe_open

    with safe_open(str(src), framework="pt") as f:
        view = f.get_slice(name)
        shape, stored = view.get_shape(), view.get_dtype()
        dtype = f.get_tensor(name).dtype  # a lazy mapping: only the dtype is read
    if len(shape) != 2:
        raise UnsupportedModel(f"{name} has shape {list(shape)}; expected [rows, hidden]", src)
    source_rows, hidden = shape
    check_allocation([(rows, hidden, stored)], src)
    result = torch.empty((rows, hidden), dtype=dtype)
    keep = min(rows, source_rows)
    step = max(1, chunk_bytes // max(1, hidden * result.element_size()))
    for start in range(0, keep, step):
        stop = min(keep, start + step)
        with safe_open(str(src), framework="pt") as f:
            result[start:stop].copy_(f.get_slice(name)[start:stop])
    result[keep:].zero_()
    return result


def memory_bound(largest_shard_bytes: int, added_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """The stated ceiling on the rewrite's peak resident memory above its baseline, in bytes (``added_bytes``: the
    rows the plan adds, :attr:`vocabcheck.aligner.AlignPlan.added_bytes`)."""
    return largest_shard_bytes + added_bytes + chunk_bytes + MEMORY_SLACK_BYTES
