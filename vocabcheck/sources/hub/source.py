"""The hub as a model source: ``open_hub`` for compare and inspect (no weights), ``download_weights`` for run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import SourceNotFound, UnsupportedModel, VocabcheckError
from ..base import MAX_CONFIG_JSON_BYTES, ModelSource, read_json_object
from ..checkpoint import SAFETENSORS_INDEX
from ..local import TOKENIZER_JSON, open_directory
from .download import fetch
from .failures import hub_errors, quiet_hub_logging
from .files import TEKKEN_JSON, checkpoint_files, tokenizer_files
from .headers import tensor_shapes
from .snapshot import Snapshot, resolve, save_manifest
from .transport import hub_timeout

DOWNLOAD_WORKERS = 4


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
    hub_timeout()  # a bad VOCABCHECK_HUB_TIMEOUT is refused before anything is asked of the hub
    with hub_errors(spec, repo_id, revision) as state, quiet_hub_logging():
        snapshot = resolve(repo_id, revision)
        names = tokenizer_files(snapshot)
        fetch(snapshot, names, state)
        tensors = description = None
        if read_checkpoint:
            tensors, description, snapshot = tensor_shapes(snapshot, state)
        save_manifest(snapshot)
    source = _open_snapshot(snapshot, names, spec)
    provenance = {fact: _hub_provenance(text, snapshot) for fact, text in source.provenance.items()}
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
    hub_timeout()
    with hub_errors(spec, repo_id, revision) as state, quiet_hub_logging():
        snapshot = resolve(repo_id, revision)
        names = tokenizer_files(snapshot)
        if SAFETENSORS_INDEX in snapshot.files:
            fetch(snapshot, [SAFETENSORS_INDEX], state)
        weights = checkpoint_files(snapshot)
        if not weights:
            raise UnsupportedModel("the repository has no safetensors weights (vocabcheck downloads safetensors "
                                   "only, never pickled .bin files)", spec)
        fetch(snapshot, [*names, *weights], state, weights=True, workers=DOWNLOAD_WORKERS)
        save_manifest(snapshot)
    return snapshot.directory


def _open_snapshot(snapshot: Snapshot, names: list[str], spec: str) -> ModelSource:
    """The tokenizer and configs from the snapshot folder; errors name the file on the hub, not its cache path."""
    directory = snapshot.directory
    try:
        if TEKKEN_JSON in names and TOKENIZER_JSON not in names:
            from ..raw import open_tekken

            source = open_tekken(directory / TEKKEN_JSON, spec)
            return replace(source, config=_read_optional_json(directory / "config.json"),
                           generation_config=_read_optional_json(directory / "generation_config.json"))
        return open_directory(directory, spec, read_checkpoint=False)
    except VocabcheckError as exc:
        exc.where = _hub_provenance(exc.where, snapshot) if exc.where else spec
        raise


def _hub_provenance(text: str, snapshot: Snapshot) -> str:
    """A provenance string that names the hub file at its commit instead of the cache path."""
    return text.replace(str(snapshot.directory), snapshot.uri)


def _read_optional_json(path: Path) -> dict[str, Any] | None:
    return read_json_object(path, MAX_CONFIG_JSON_BYTES, path.name) if path.is_file() else None
