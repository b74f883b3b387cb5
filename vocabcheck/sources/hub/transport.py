"""HTTP to the hub: an overall deadline per request, and reads that never take more of a body than asked for.

huggingface_hub gives each socket read a timeout (``HF_HUB_DOWNLOAD_TIMEOUT``, ``HF_HUB_ETAG_TIMEOUT``), which a server
that sends one byte every few seconds never trips. So every request made for ``compare`` and ``inspect`` (the model
description, each small file, each safetensors header range) runs inside :func:`deadline`: ``VOCABCHECK_HUB_TIMEOUT``
seconds (default 60) for the whole request, redirects and retries included. Each connect, write and read of its
connection may take at most the time left; when none is left, the request ends with :class:`HubDeadline`.

The deadline is a context variable that the network streams of huggingface_hub's HTTP client consult
(:func:`_arm_session` wraps the client's network backend), so requests made inside huggingface_hub
(``hf_hub_download``) are bounded too; outside a :func:`deadline` block the streams behave exactly as before.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ...errors import InputError, RemoteError

HUB_TIMEOUT_ENV = "VOCABCHECK_HUB_TIMEOUT"
DEFAULT_HUB_TIMEOUT = 60.0
ERROR_BODY_BYTES = 64 * 1024  # of an error answer, enough for huggingface_hub to read the hub's message
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+\d+-\d+/(\d{1,20})\s*$")


def hub_timeout() -> float:
    """Seconds each hub request may take in all, from ``VOCABCHECK_HUB_TIMEOUT``."""
    text = os.environ.get(HUB_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_HUB_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError(f"not a number of seconds above 0: {text[:40]!r}", HUB_TIMEOUT_ENV)
    return seconds


class HubDeadline(Exception):
    """A request that did not complete within its deadline. Deliberately not an httpx error: huggingface_hub retries
    those (a second apart), and this one must end the request at once."""

    def __init__(self, what: str, seconds: float):
        super().__init__(f"{what} did not answer in full within {seconds:g} s ({HUB_TIMEOUT_ENV})")


@dataclass(frozen=True)
class _Deadline:
    at: float  # time.monotonic()
    seconds: float
    what: str


_DEADLINE: ContextVar[_Deadline | None] = ContextVar("vocabcheck_hub_deadline", default=None)
_ARMED = "_vocabcheck_deadlines"
_ARM_LOCK = threading.Lock()


@contextmanager
def deadline(what: str) -> Iterator[None]:
    """Bound every request made in the block (in this thread) to ``VOCABCHECK_HUB_TIMEOUT`` seconds from now;
    ``what`` (a URL) names the request in the error."""
    seconds = hub_timeout()
    _arm_session()
    token = _DEADLINE.set(_Deadline(time.monotonic() + seconds, seconds, what))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _bounded(call: Callable[..., Any], timeout: float | None, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, timeout=...)`` with the timeout cut to what is left of the current deadline."""
    current = _DEADLINE.get()
    if current is None:
        return call(*args, timeout=timeout, **kwargs)
    left = current.at - time.monotonic()
    if left <= 0:
        raise HubDeadline(current.what, current.seconds)
    try:
        return call(*args, timeout=left if timeout is None else min(timeout, left), **kwargs)
    except Exception as exc:  # httpcore's ConnectTimeout, ReadTimeout, WriteTimeout once the time is up
        if time.monotonic() >= current.at:
            raise HubDeadline(current.what, current.seconds) from exc
        raise


class _Stream:
    """An httpcore network stream whose every operation is bounded by the deadline of the calling context."""

    def __init__(self, inner: Any):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _bounded(self._inner.read, timeout, max_bytes)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _bounded(self._inner.write, timeout, buffer)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> _Stream:
        return _Stream(_bounded(self._inner.start_tls, timeout, ssl_context, server_hostname))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """An httpcore network backend whose connections are :class:`_Stream` objects."""

    def __init__(self, inner: Any):
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _Stream:
        return _Stream(_bounded(self._inner.connect_tcp, timeout, host, port, local_address=local_address,
                                socket_options=socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> _Stream:
        return _Stream(_bounded(self._inner.connect_unix_socket, timeout, path, socket_options=socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _arm_session() -> None:
    """Put :class:`_Backend` under the connection pools of huggingface_hub's shared HTTP client (once per client).

    httpx and httpcore take a network backend only through private attributes (``Client._transport``,
    ``HTTPTransport._pool``, ``ConnectionPool._network_backend``); this is the one place that touches them, and the
    deadline tests fail if a new version moves them. A client the user built on other transports is left as it is.
    """
    from huggingface_hub.utils import get_session

    session = get_session()
    if getattr(session, _ARMED, False):
        return
    with _ARM_LOCK:
        for transport in (getattr(session, "_transport", None), *getattr(session, "_mounts", {}).values()):
            pool = getattr(transport, "_pool", None)
            backend = getattr(pool, "_network_backend", None)
            if backend is not None and not isinstance(backend, _Backend):
                pool._network_backend = _Backend(backend)
        setattr(session, _ARMED, True)


# --- reads --------------------------------------------------------------------------------------------------------


def get_bytes(url: str, *, params: Mapping[str, Any], headers: Mapping[str, str], limit: int) -> bytes:
    """The body of ``GET url``, refused past ``limit`` bytes (read no further than one byte over)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    with get_session().stream("GET", url, params=params, headers=headers,
                              timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        raise_for_status(response)
        body = read_at_most(response, limit + 1)
    if len(body) > limit:
        raise RemoteError(f"{url} answered more than {limit:,} bytes")
    return body


def get_range(url: str, start: int, end: int, headers: Mapping[str, str], what: str) -> tuple[bytes, int | None]:
    """Bytes ``start..end`` (inclusive) of ``url``, and the file's size when the answer gives it (``Content-Range``,
    or ``Content-Length`` of a whole-file answer). Never reads more of the body than asked for, whatever the server."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    request_headers = {**headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
    with get_session().stream("GET", url, headers=request_headers,
                              timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        raise_for_status(response)
        if response.status_code == 200 and start > 0:
            raise RemoteError(f"{what}: the server ignored the byte range of a header request")
        return read_at_most(response, end - start + 1), _file_size(response)


def _file_size(response: Any) -> int | None:
    if response.headers.get("Content-Encoding", "identity").lower() != "identity":
        return None
    if response.status_code == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        return int(match[1]) if match else None
    length = response.headers.get("Content-Length", "")
    return int(length) if response.status_code == 200 and length.isdigit() and len(length) <= 20 else None


def raise_for_status(response: Any) -> None:
    """huggingface_hub's error for an error answer of a streamed request (reading at most 64 KiB of its body)."""
    if response.status_code < 400:
        return
    import httpx2
    from huggingface_hub.utils import hf_raise_for_status

    body = read_at_most(response, ERROR_BODY_BYTES)
    hf_raise_for_status(httpx2.Response(response.status_code, headers=response.headers, content=body,
                                        request=response.request))


def read_at_most(response: Any, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk[:limit - got])
        got += len(chunks[-1])
        if got >= limit:
            break
    return b"".join(chunks)
