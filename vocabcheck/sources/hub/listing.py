"""What the hub says about a repository at a revision: the commit it resolves to and the files there with their
sizes, from one API call (``GET /api/models/{repo}/revision/{revision}?blobs=true``).

The answer is read as JSON and checked field by field before anything uses it. (huggingface_hub's ``ModelInfo`` takes
what it is given: a ``siblings`` that is a string fails deep inside it, a file name that is a number or a size that
is a string passes.) A server that answers anything else is one line naming the URL and what is wrong with the
answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ...errors import InputError, RemoteError
from ..base import parse_json
from .transport import deadline, get_bytes

COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The model description lists every file of the repository: ~200 bytes each, so this is room for 300,000 files.
MAX_MODEL_INFO_BYTES = 64 * 1024 * 1024
_WHAT = "the hub's model description"


@dataclass(frozen=True)
class Listing:
    commit: str
    files: dict[str, int | None]  # file name -> size in bytes (None: the hub did not say)


def fetch_listing(repo_id: str, revision: str) -> Listing:
    """The commit ``revision`` names in ``repo_id`` and the files there, asked of the hub within the deadline."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, validate_repo_id

    validate_repo_id(repo_id)
    url = f"{constants.ENDPOINT}/api/models/{repo_id}/revision/{quote(revision, safe='')}"
    with deadline(url):
        body = get_bytes(url, params={"blobs": True}, headers=build_hf_headers(), limit=MAX_MODEL_INFO_BYTES)
    return parse_listing(body, url, revision)


def parse_listing(body: bytes, url: str, revision: str) -> Listing:
    """The commit and the file sizes from the JSON answer ``body`` of ``url``; :class:`InputError` naming ``url``
    when the answer is not a model description."""
    from huggingface_hub import constants

    document = parse_json(body, url, _WHAT)
    if not isinstance(document, dict):
        raise InputError(f"{_WHAT} must be a JSON object, found {_kind(document)}", url)
    commit = document.get("sha")
    if not isinstance(commit, str) or not COMMIT.match(commit):
        raise RemoteError(f"the hub at {constants.ENDPOINT} gave no commit for revision {revision!r}")
    siblings = document.get("siblings")
    if siblings is None:
        siblings = []
    if not isinstance(siblings, list):
        raise InputError(f"{_WHAT} gives 'siblings' as {_kind(siblings)}, not a list of files", url)
    files: dict[str, int | None] = {}
    for number, entry in enumerate(siblings):
        name, size = _sibling(entry, f"siblings[{number}]", url)
        files[name] = size
    return Listing(commit, files)


def _sibling(entry: Any, field: str, url: str) -> tuple[str, int | None]:
    """One file of the listing: its name and size (the LFS size for a file stored in LFS)."""
    if not isinstance(entry, dict):
        raise InputError(f"{_WHAT} gives {field} as {_kind(entry)}, not an object", url)
    name = entry.get("rfilename")
    if not isinstance(name, str) or not name:
        raise InputError(f"{_WHAT} gives {field}.rfilename as {_kind(name)}, not a file name", url)
    size = _size(entry.get("size"), f"{field}.size", url)
    lfs = entry.get("lfs")
    if lfs is not None:
        if not isinstance(lfs, dict):
            raise InputError(f"{_WHAT} gives {field}.lfs as {_kind(lfs)}, not an object", url)
        size = _size(lfs.get("size"), f"{field}.lfs.size", url)
    return name, size


def _size(value: Any, field: str, url: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise InputError(f"{_WHAT} gives {field} as {_kind(value)}, not a byte count", url)
    return value


def _kind(value: Any) -> str:
    """A JSON value as a message names it: its type, and the value itself when it is short."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    kind = kinds.get(type(value), type(value).__name__)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = repr(value)
        return f"{kind} {text if len(text) <= 40 else text[:40] + '…'}"
    return kind
