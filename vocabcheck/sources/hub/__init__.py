"""Models on the Hugging Face Hub: ``org/name`` or ``org/name@revision``, without downloading weights.

What a comparison needs from a repository is a few megabytes: the tokenizer and config files, and the tensor shapes
in the safetensors headers. This package asks the hub for:

1. the repository's file list and sizes at the revision, and the commit it resolves to (one API call, checked field
   by field: :mod:`.listing`);
2. the tokenizer, config, generation-config, special-tokens and chat-template files, into the normal Hugging Face
   cache (``hf_hub_download``, pinned to the resolved commit, each held to its listed size: :mod:`.download`), so a
   second run reads them from disk and ``HF_HUB_OFFLINE=1`` works;
3. the header of each safetensors file, with HTTP range requests, checked by the parser local files go through
   (:mod:`.headers`).

Every request runs under an overall deadline, ``VOCABCHECK_HUB_TIMEOUT`` seconds (:mod:`.transport`). The header
shapes and the file list are kept per commit in the Hugging Face assets cache (:mod:`.snapshot`), which is what lets
an offline run or a second run skip the requests. ``HF_TOKEN``, ``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_CACHE`` and
``HF_HUB_OFFLINE`` mean what they mean to huggingface_hub. Weights are downloaded only by :func:`download_weights`,
which ``vocabcheck run`` calls after a pair has passed the compatibility check.

Every failure is a :class:`~vocabcheck.errors.VocabcheckError` about the spec the user typed (:mod:`.failures`).
Downloads are reported to the hook of :mod:`vocabcheck.sources.progress`; nothing here draws.
"""

from __future__ import annotations

from .download import SizeLimit
from .download import _bar_factory as _bar_factory  # the tests drive it as huggingface_hub does
from .files import SLOW_FILES, SMALL_FILES, TEKKEN_JSON, WEIGHT_SUFFIXES
from .headers import HEADER_PROBE_BYTES, HEADER_WORKERS
from .listing import COMMIT, Listing, parse_listing
from .snapshot import MANIFEST_FORMAT, Snapshot, storage_folder
from .source import DOWNLOAD_WORKERS, download_weights, open_hub, parse_spec
from .transport import DEFAULT_HUB_TIMEOUT, HUB_TIMEOUT_ENV, HubDeadline, hub_timeout

_storage = storage_folder  # the name tests and older callers use

__all__ = [
    "COMMIT", "DEFAULT_HUB_TIMEOUT", "DOWNLOAD_WORKERS", "HEADER_PROBE_BYTES", "HEADER_WORKERS", "HUB_TIMEOUT_ENV",
    "MANIFEST_FORMAT", "SLOW_FILES", "SMALL_FILES", "TEKKEN_JSON", "WEIGHT_SUFFIXES", "HubDeadline", "Listing",
    "SizeLimit", "Snapshot", "download_weights", "hub_timeout", "open_hub", "parse_listing", "parse_spec",
    "storage_folder",
]
