"""The one place where huggingface_hub, httpx and cache failures become vocabcheck errors: one line about the spec
the user typed, naming the hub, the file or the URL involved."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import InputError, RemoteError, SourceNotFound, VocabcheckError
from .transport import HubDeadline


class State:
    """What is being fetched when something goes wrong, for the error message."""

    def __init__(self) -> None:
        self.file: str | None = None


@contextmanager
def naming(name: str, state: State) -> Iterator[None]:
    """Record ``name`` as the file an error is about (also when it happens in a worker thread)."""
    state.file = name
    try:
        yield
    except BaseException as exc:
        exc.vocabcheck_file = name  # type: ignore[attr-defined]
        raise


@contextmanager
def hub_errors(spec: str, repo_id: str, revision: str) -> Iterator[State]:
    """Turn every huggingface_hub and network failure inside the block into one VocabcheckError about ``spec``."""
    state = State()
    try:
        try:
            yield state
        except BaseException as exc:
            state.file = getattr(exc, "vocabcheck_file", None) or state.file
            raise
    except VocabcheckError as exc:
        _name_cached_file(exc, spec)
        raise
    except Exception as exc:
        mapped = _mapped(exc, state, repo_id, revision)
        if mapped is None:
            raise
        mapped.where = spec
        raise mapped from exc


def _name_cached_file(exc: VocabcheckError, spec: str) -> None:
    from huggingface_hub import constants

    cache = str(Path(constants.HF_HUB_CACHE).expanduser())
    if exc.where is not None and exc.where.startswith(cache):  # a cached file: name it, not its cache path
        exc.problem = f"{Path(exc.where).name}: {exc.problem}"
        exc.args = (exc.problem,)
        exc.where = None
    if exc.where is None:
        exc.where = spec


def _mapped(exc: Exception, state: State, repo_id: str, revision: str) -> VocabcheckError | None:
    """The VocabcheckError for a library failure, or ``None`` for anything else (a bug: it propagates)."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub import errors as hub

    endpoint = constants.ENDPOINT
    file = state.file or "a file"
    if isinstance(exc, HubDeadline):
        return RemoteError(str(exc))
    if isinstance(exc, hub.HFValidationError):
        return SourceNotFound(f"not a valid hub repository id: {reason(exc)}")
    if isinstance(exc, hub.GatedRepoError):
        return RemoteError(f"gated repository: your token has no access (accept the conditions at {endpoint}/"
                           f"{repo_id}, then set HF_TOKEN or run `hf auth login`)")
    if isinstance(exc, hub.RepositoryNotFoundError):
        return SourceNotFound(f"repository not found on {endpoint} (if it is private, set HF_TOKEN or run "
                              "`hf auth login`)")
    if isinstance(exc, hub.RevisionNotFoundError):
        return SourceNotFound(f"revision {revision!r} not found in {repo_id}")
    if isinstance(exc, hub.RemoteEntryNotFoundError):
        return SourceNotFound(f"{file} not found in {repo_id}@{revision}")
    if isinstance(exc, hub.DisabledRepoError):
        return RemoteError("access to this repository is disabled on the hub")
    if isinstance(exc, (hub.LocalEntryNotFoundError, hub.OfflineModeIsEnabled)):
        return RemoteError(f"{file} of {repo_id}@{revision} is not in the local cache and the hub cannot be used "
                           f"({_offline_reason(exc)})")
    if isinstance(exc, hub.FileMetadataError):
        return RemoteError(f"{endpoint} does not answer like a Hugging Face hub ({reason(exc)}); check HF_ENDPOINT")
    if isinstance(exc, hub.HfHubHTTPError):
        return RemoteError(_http_problem(exc, endpoint, state.file))
    if isinstance(exc, (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.ReadTimeout)):
        what = f"downloading {state.file}" if state.file else f"talking to {endpoint}"
        return RemoteError(f"the connection broke while {what} ({reason(exc)})")
    if isinstance(exc, httpx2.TransportError):
        return RemoteError(f"cannot reach the hub at {endpoint} ({reason(exc)})")
    if isinstance(exc, OSError):
        return _os_problem(exc, file)
    return None


def _http_problem(exc: Exception, endpoint: str, file: str | None) -> str:
    response = getattr(exc, "response", None)
    status = response.status_code if response is not None else 0
    if status == 401:
        problem = "the hub rejected the token (HF_TOKEN): invalid credentials"
    elif status >= 500:
        problem = f"the hub at {endpoint} answered HTTP {status} (server error); try again later"
    else:
        problem = f"the hub at {endpoint} answered HTTP {status}"
    return f"{problem} for {file}" if file else problem


def _os_problem(exc: OSError, file: str) -> VocabcheckError:
    from huggingface_hub import constants

    text = reason(exc)
    match = re.search(r"should be of size (\d+) but has size (\d+)", text)
    if match:
        return RemoteError(f"download of {file} was incomplete: the hub announced {int(match[1]):,} bytes and sent "
                           f"{int(match[2]):,}")
    return InputError(f"cannot write to the Hugging Face cache {constants.HF_HUB_CACHE}: {text}")


def reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__)[:300]


def _offline_reason(exc: BaseException) -> str:
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return "HF_HUB_OFFLINE is set"
    cause = exc.__cause__ or exc.__context__
    return reason(cause) if cause is not None else reason(exc)


@contextmanager
def quiet_hub_logging() -> Iterator[None]:
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
