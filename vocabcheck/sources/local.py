"""Models on the local disk: a model directory, or a bare tokenizer.json file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError, SourceNotFound, UnsupportedModel
from . import convert
from .base import (
    MAX_CHAT_TEMPLATE_BYTES,
    MAX_CONFIG_JSON_BYTES,
    MAX_TOKENIZER_JSON_BYTES,
    ModelSource,
    read_capped,
    read_json_object,
)
from .checkpoint import find_checkpoint

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
CHAT_TEMPLATE_JINJA = "chat_template.jinja"
CHAT_TEMPLATE_JSON = "chat_template.json"
SLOW_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model")


def open_directory(directory: Path, spec: str, *, read_checkpoint: bool = True) -> ModelSource:
    provenance: dict[str, str] = {}
    tokenizer_config = _optional_json(directory / TOKENIZER_CONFIG, "tokenizer_config.json", provenance,
                                      "tokenizer_config")
    config_provenance: dict[str, str] = {}  # read first (custom-code check), listed after the tokenizer
    config = _optional_json(directory / CONFIG, "config.json", config_provenance, "config")
    tokenizer_file = directory / TOKENIZER_JSON
    if tokenizer_file.is_file():
        tokenizer_json = read_tokenizer_json(tokenizer_file)
        provenance["tokenizer"] = str(tokenizer_file)
    else:
        _refuse_custom_code(directory, tokenizer_config, config)
        present = [name for name in SLOW_TOKENIZER_FILES if (directory / name).is_file()]
        if not present:
            raise SourceNotFound("no tokenizer here: expected tokenizer.json, or tokenizer.model / vocab.json + "
                                 "merges.txt / vocab.txt for transformers to convert", directory)
        tokenizer_json = convert.from_transformers(directory)
        provenance["tokenizer"] = f"{directory} ({', '.join(present)}, converted by transformers)"
    provenance.update(config_provenance)
    generation = _optional_json(directory / GENERATION_CONFIG, "generation_config.json", provenance,
                                "generation_config")
    special_map = _optional_json(directory / SPECIAL_TOKENS_MAP, "special_tokens_map.json", provenance,
                                 "special_tokens_map")
    chat_template = _chat_template(directory, tokenizer_config or {}, provenance)
    tensors = None
    weights: tuple[str, ...] = ()
    if read_checkpoint:
        checkpoint = find_checkpoint(directory)
        if checkpoint is not None:
            tensors = checkpoint.tensors
            weights = tuple(str(p) for p in checkpoint.files)
            provenance["tensors"] = f"{directory}/{checkpoint.description}"
    return ModelSource(
        spec=spec,
        kind="directory",
        location=str(directory),
        tokenizer_json=tokenizer_json,
        tokenizer_config=tokenizer_config or {},
        special_tokens_map=special_map or {},
        config=config,
        generation_config=generation,
        chat_template=chat_template,
        tensors=tensors,
        provenance=provenance,
        weights=weights,
    )


def open_tokenizer_json(path: Path, spec: str) -> ModelSource:
    return ModelSource(spec=spec, kind="tokenizer.json", location=str(path), tokenizer_json=read_tokenizer_json(path),
                       provenance={"tokenizer": str(path)})


def read_tokenizer_json(path: Path) -> str:
    data = read_capped(path, MAX_TOKENIZER_JSON_BYTES, "tokenizer.json")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("tokenizer.json is not UTF-8 text", path) from exc


def _optional_json(path: Path, what: str, provenance: dict[str, str], fact: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    provenance[fact] = str(path)
    return read_json_object(path, MAX_CONFIG_JSON_BYTES, what)


def _refuse_custom_code(directory: Path, tokenizer_config: dict[str, Any] | None,
                        config: dict[str, Any] | None) -> None:
    """A repository whose tokenizer is its own Python code (``auto_map.AutoTokenizer`` in tokenizer_config.json or
    config.json) and that ships no tokenizer.json cannot be read as data: converting its files with a built-in class
    could describe another tokenizer than the one its code builds."""
    for name, document in (("tokenizer_config.json", tokenizer_config), ("config.json", config)):
        auto_map = (document or {}).get("auto_map")
        if isinstance(auto_map, dict) and "AutoTokenizer" in auto_map:
            raise UnsupportedModel(f"this tokenizer is custom code from the repository ({name} auto_map) and ships "
                                   "no tokenizer.json; vocabcheck never runs repository code", directory)


def _chat_template(directory: Path, tokenizer_config: dict[str, Any], provenance: dict[str, str]) -> str | None:
    jinja = directory / CHAT_TEMPLATE_JINJA
    if jinja.is_file():
        provenance["chat_template"] = str(jinja)
        data = read_capped(jinja, MAX_CHAT_TEMPLATE_BYTES, "chat template")
        return data.decode("utf-8", errors="replace")
    as_json = directory / CHAT_TEMPLATE_JSON
    if as_json.is_file():
        value = read_json_object(as_json, MAX_CHAT_TEMPLATE_BYTES, "chat_template.json").get("chat_template")
        if value is not None:
            provenance["chat_template"] = str(as_json)
            return chat_template_text(value, as_json)
    value = tokenizer_config.get("chat_template")
    if value is not None:
        provenance["chat_template"] = provenance.get("tokenizer_config", str(directory / TOKENIZER_CONFIG))
        return chat_template_text(value, directory / TOKENIZER_CONFIG)
    return None


def chat_template_text(value: Any, where: Path | str) -> str:
    """A chat template as one string; named templates (a list of {name, template}) are joined by name."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, dict) and isinstance(v.get("template"), str) for v in value):
        return "\n".join(f"{{# {v.get('name', 'default')} #}}{v['template']}"
                         for v in sorted(value, key=lambda v: str(v.get("name", ""))))
    raise InputError("chat_template must be a string or a list of {name, template}", where)
