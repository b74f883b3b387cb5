"""Writing files so that a crash, Ctrl-C, SIGTERM or SIGHUP leaves the old file or none, never half of one.

Under the command line's signal handlers (:mod:`vocabcheck.interrupts`) a signal cannot cut short the cleanup of a
temporary file or the renames that replace a directory: it is raised when they are done.

A writer never replaces what is not a regular file: a FIFO, a device node or a socket at the path is refused with
:class:`NotARegularFile` (an ``OSError``), and left as it was. The one exception is the process's own standard output
or error (``/dev/stdout``, ``/dev/fd/2``, ``/proc/self/fd/1``: the same file as descriptor 1 or 2), which is what a
user means by such a path: the data is written through to that descriptor.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .interrupts import deferred


class NotARegularFile(OSError):
    """The path holds a FIFO, a device node or a socket, which a writer does not replace."""


class TooLarge(OSError):
    """A file larger than its reader's cap, refused before it is read."""


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``max_bytes``: a FIFO, a device, a socket or a symbolic link
    is refused (:class:`NotARegularFile`) without blocking or following it, a larger file (:class:`TooLarge`) before
    any of it is read, and a file that grows while it is read is cut at the cap and refused too."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFile(errno.ELOOP, "is a symbolic link; vocabcheck reads kept state only from a regular "
                                               "file", str(path)) from exc
        raise
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            kind = next((name for test, name in _KINDS if test(found.st_mode)), "not a regular file")
            raise NotARegularFile(errno.EINVAL, f"is {kind}, not a regular file", str(path))
        if found.st_size > max_bytes:
            raise TooLarge(errno.EFBIG, f"is {found.st_size:,} bytes, over the {max_bytes:,} this reader takes",
                           str(path))
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise TooLarge(errno.EFBIG, f"grew past the {max_bytes:,} bytes this reader takes", str(path))
    return data


def replace_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename, whatever is at ``path`` (a symbolic
    link, a FIFO, a device node is replaced, never written through): for vocabcheck's own kept state."""
    return _replace(Path(path), data)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and an atomic rename; to the
    process's standard output or error when ``path`` names it; :class:`NotARegularFile` for another special file."""
    path = Path(path)
    stream = _standard_stream(path)
    if stream is not None:
        _write_through(stream, data)
        return path
    return _replace(path, data)


def _replace(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the mode open() would have
        os.replace(tmp, path)
    except BaseException:
        with deferred():
            _remove(tmp)
        raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    """UTF-8; a surrogate from a path that is not UTF-8 ('\\udcff') is written as the text \\udcff (in a JSON string,
    the escape of the same character)."""
    return write_bytes(path, text.encode("utf-8", "backslashreplace"))


@contextmanager
def directory(path: str | Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling directory to fill; on success it replaces ``path`` as a whole.

    With ``replace=False`` it takes the place of ``path`` only if nothing or an empty directory is there at that
    moment (one rename, which the kernel refuses onto a directory that holds files): otherwise FileExistsError, so of
    two writers racing for one ``path`` the second fails instead of replacing the first's work.

    On any exception (KeyboardInterrupt included) the temporary directory is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file() and not child.is_symlink():
                os.chmod(child, 0o666 & ~_umask())
        with deferred():  # the old directory moves aside and the new one in, both or neither
            if not replace:
                try:
                    os.rename(tmp, path)
                except OSError as exc:
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                        raise
                    raise FileExistsError(errno.EEXIST, "exists and is not empty", str(path)) from exc
            elif path.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
                os.replace(path, old / "previous")
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
    except BaseException:
        with deferred():
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_writable(path: str | Path) -> None:
    """Refuse, before any work, what a writer would refuse at ``path``: :class:`NotARegularFile` for a FIFO, a
    device node or a socket (the process's own standard output or error passes)."""
    _standard_stream(Path(path))


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _standard_stream(path: Path) -> int | None:
    """1 or 2 when ``path`` is this process's standard output or error; ``None`` for a regular file, a directory or
    nothing; :class:`NotARegularFile` for any other kind of file."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for fd in (1, 2):
        try:
            stream = os.fstat(fd)
        except OSError:
            continue
        if (stream.st_dev, stream.st_ino) == (found.st_dev, found.st_ino):
            return fd
    if stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode):
        return None
    kind = next((name for test, name in _KINDS if test(found.st_mode)), "not a regular file")
    raise NotARegularFile(errno.EINVAL, f"is {kind}, not a regular file; vocabcheck writes only regular files "
                                        "(and /dev/stdout, /dev/stderr)", str(path))


def _write_through(fd: int, data: bytes) -> None:
    for stream in (sys.stdout, sys.stderr):  # what the process printed before comes first
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass
