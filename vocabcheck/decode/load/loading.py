"""Models and prompts for the decoder."""

from __future__ import annotations

import errno
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ... import atomic
from ...errors import BadOption, InputError, UnsupportedModel, VocabcheckError
from ...limits import (
    MAX_JSONL_DEPTH, MAX_PROMPT_CHARS, MAX_PROMPT_FILE_BYTES, MAX_PROMPTS, PROMPT_CHARS_ENV, PROMPT_FILE_BYTES_ENV,
    PROMPTS_ENV, cap_from_env,
)
from ...profile import ModelProfile


def model_directory(profile: ModelProfile) -> Path:
    """The local directory holding a model's weights (hub models are downloaded after the pair passed compare)."""
    if profile.kind == "hub":
        from ...sources.hub import download_weights

        return Path(download_weights(profile.spec))
    if profile.kind == "gguf":
        raise InputError("vocabcheck runs and benchmarks Hugging Face checkpoints through transformers; a GGUF file "
                         "can be compared and inspected, and run with llama.cpp", profile.location)
    if profile.kind != "directory" or not profile.source.weights:
        raise InputError("generation needs a model directory with weights; this is a "
                         f"{profile.kind} without a checkpoint", profile.location)
    return Path(profile.location)


def load_model(profile: ModelProfile, device, dtype):
    """A causal LM from its directory, never with repository code, in eval mode on ``device``."""
    import transformers
    from huggingface_hub.errors import StrictDataclassError  # transformers' config validation
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    directory = model_directory(profile)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype, trust_remote_code=False,
                                                     local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, AttributeError, StrictDataclassError) as exc:
        raise InputError(f"transformers cannot load this model: {str(exc).strip().splitlines()[0][:300]}",
                         directory) from exc
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


def check_rollback(profile: ModelProfile) -> None:
    """Refuse, before any weight is loaded, a model whose KV cache speculative decoding cannot roll back
    (recurrent or linear-attention state): one line, exit code 2. Plain decoding is not checked."""
    from .layout import rollback_problem

    config = model_config(profile)
    if config is None:
        return
    from transformers import AutoModelForCausalLM

    try:
        model_class = AutoModelForCausalLM._model_mapping[type(config)]
    except (KeyError, ValueError, ImportError, AttributeError):
        model_class = None  # loading the model says what is wrong with it
    problem = rollback_problem(config, model_class)
    if problem is not None:
        raise UnsupportedModel(problem, profile.location)


def model_config(profile: ModelProfile):
    """The transformers config of a model from its config.json (already read by the profile), or None without one
    or where transformers does not know its model type (loading the model then says so). Read as ``from_pretrained``
    reads the file: floats JSON cannot hold (``{"__float__": "Infinity"}``, Mamba2's ``time_step_limit``) decoded."""
    from transformers import CONFIG_MAPPING

    data = dict(profile.source.config or {})
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None
    config_class = CONFIG_MAPPING[model_type]
    decode_floats = getattr(config_class, "_decode_special_floats", None)  # what _dict_from_json_file applies
    try:
        return config_class.from_dict(decode_floats(data) if decode_floats else data)
    except Exception as exc:  # transformers validates field types with several exception classes
        raise InputError(f"transformers cannot read this config: {str(exc).strip().splitlines()[0][:300]}",
                         profile.provenance.get("config", profile.location)) from exc


@dataclass(frozen=True)
class Prompt:
    text: str | None
    messages: tuple[dict[str, Any], ...] | None = None
    response: str | None = None  # a JSONL line's "response": what the target answered (recorded traffic, `predict`)
    origin: tuple[Path, int] | None = field(default=None, compare=False)  # (prompt file, line) it was read from


PROMPT_FORMATS = ("text", "jsonl")


def read_prompt_file(path: Path, prompt_format: str | None = None) -> list[Prompt]:
    """The prompts of a file (rules in docs/prompts.md). ``prompt_format`` ``"text"``: one prompt per line;
    ``"jsonl"``: each line a JSON string, or an object with "prompt"/"text" or "messages" and an optional string
    "response". ``None`` decides by the name: JSONL for a ``.jsonl`` suffix, text otherwise (a ``.json`` file is
    refused as ambiguous). Lines end at ``\n`` or ``\r\n`` only; blank lines are skipped."""
    if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
        raise BadOption(f"--prompt-format must be one of {', '.join(PROMPT_FORMATS)}, not {prompt_format!r}")
    suffix = path.suffix.lower()
    if prompt_format is None and suffix == ".json":
        raise InputError("a .json prompt file is ambiguous: give --prompt-format jsonl (one JSON value a line) or "
                         "--prompt-format text", path)
    jsonl = prompt_format == "jsonl" or (prompt_format is None and suffix == ".jsonl")
    most = cap_from_env(PROMPTS_ENV, MAX_PROMPTS, "prompts")
    longest = cap_from_env(PROMPT_CHARS_ENV, MAX_PROMPT_CHARS, "characters")
    prompts = []
    for number, line in enumerate(_lines(_prompt_text(path)), start=1):
        if line.strip():
            if len(prompts) == most:
                raise InputError(f"prompt file holds more than {most:,} prompts; {PROMPTS_ENV} sets another limit",
                                 path)
            prompt = _jsonl_prompt(line, number, path) if jsonl else Prompt(line)
            _check_size(prompt, number, longest, path)
            prompts.append(replace(prompt, origin=(path, number)))
    if not prompts:
        raise InputError("prompt file holds no prompts", path)
    return prompts


def _check_size(prompt: Prompt, number: int, longest: int, path: Path) -> None:
    texts = [prompt.text or "", prompt.response or ""]
    texts += [str(m.get("content", "")) for m in prompt.messages or () if isinstance(m, dict)]
    size = max(len(t) for t in texts)
    if size > longest:
        raise InputError(f"line {number} holds {size:,} characters in one prompt, more than {longest:,}; "
                         f"{PROMPT_CHARS_ENV} sets another limit", path)


def _prompt_text(path: Path) -> str:
    """The file's text, read as bytes so that no newline is translated (a lone ``\r`` stays inside its prompt);
    a UTF-8 byte order mark at the start is dropped."""
    cap = cap_from_env(PROMPT_FILE_BYTES_ENV, MAX_PROMPT_FILE_BYTES, "bytes")
    try:
        return atomic.read_regular(path, cap).decode("utf-8-sig")
    except FileNotFoundError as exc:
        raise InputError("prompt file not found", path) from exc
    except atomic.TooLarge as exc:
        raise InputError(f"prompt file {exc.strerror}; {PROMPT_FILE_BYTES_ENV} sets another limit", path) from exc
    except atomic.NotARegularFile as exc:
        if exc.errno == errno.ELOOP:  # a prompt file may be a link: read where it points, checked the same way
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):  # a dangling link, a loop
                return _unreadable(path, exc)
            return _prompt_text(target) if target != path else _unreadable(path, exc)
        raise InputError(f"prompt file {exc.strerror}", path) from exc
    except IsADirectoryError as exc:
        raise InputError("prompt file is a directory", path) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read prompt file: {exc}", path) from exc


def _unreadable(path: Path, exc: OSError):
    raise InputError(f"cannot read prompt file: {exc.strerror}", path) from exc


def _jsonl_prompt(line: str, number: int, path: Path) -> Prompt:
    if line.count("[") + line.count("{") > MAX_JSONL_DEPTH and _depth(line) > MAX_JSONL_DEPTH:
        raise InputError(f"line {number} nests deeper than {MAX_JSONL_DEPTH} levels", path)
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"line {number} is not JSON ({exc.msg})", path) from exc
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"line {number} holds a lone surrogate ({exc.object[exc.start:exc.end]!a}), which is not "
                         "text", path) from exc
    if isinstance(value, str):
        return Prompt(value)
    if not isinstance(value, dict):
        raise InputError(f"line {number} needs a string, or an object with 'prompt', 'text' or 'messages'", path)
    response = value.get("response")
    if response is not None and not isinstance(response, str):
        raise InputError(f"line {number}: 'response' must be a string, not {json.dumps(response)[:40]}", path)
    if isinstance(value.get("messages"), list):
        return Prompt(None, tuple(value["messages"]), response)
    if isinstance(value.get("prompt", value.get("text")), str):
        return Prompt(value.get("prompt", value.get("text")), response=response)
    raise InputError(f"line {number} needs a string, or an object with 'prompt', 'text' or 'messages'", path)


def _depth(line: str) -> int:
    """The deepest nesting of brackets in a JSON line, outside strings (read before parsing, which recurses)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in line:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _lines(text: str) -> list[str]:
    """Lines split at newline (and CRLF) only: a lone carriage return, U+2028, U+2029, form feed and the other
    characters that ``str.splitlines`` also breaks at are text inside a prompt."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def check_room(profile: ModelProfile, max_new_tokens: int | None) -> None:
    """Refuse ``--max-new-tokens`` that cannot fit the target's context (``max_position_embeddings``), before any
    weight is loaded; a model that states no context is not checked here."""
    context = (profile.source.config or {}).get("max_position_embeddings")
    if max_new_tokens is not None and type(context) is int and 0 < context <= max_new_tokens:
        raise BadOption(f"--max-new-tokens {max_new_tokens:,} does not fit the target's context of {context:,} "
                        f"tokens (max_position_embeddings of {profile.location})")


def encode_prompts(profile: ModelProfile, prompts: Sequence[Prompt], chat: bool) -> list[list[int]]:
    """Token ids for each prompt, with the target's tokenizer (and chat template with ``chat``: every conversation
    rendered at once, bounded, by :func:`vocabcheck.decode.load.templates.render_chats`)."""
    from .templates import render_chats

    tokenizer = profile.source.tokenizer
    chats = [i for i, prompt in enumerate(prompts) if chat or prompt.messages is not None]
    conversations = [prompts[i].messages or ({"role": "user", "content": prompts[i].text},) for i in chats]
    rendered = dict(zip(chats, render_chats(profile, conversations))) if chats else {}
    encoded = []
    for index, prompt in enumerate(prompts):
        if index in rendered:
            ids = tokenizer.encode(rendered[index], add_special_tokens=False).ids
        else:
            ids = tokenizer.encode(prompt.text, add_special_tokens=True).ids
        if not ids:
            if prompt.origin is not None:
                raise InputError(f"line {prompt.origin[1]}: the prompt encodes to no tokens; give it some text",
                                 prompt.origin[0])
            raise VocabcheckError("a prompt encodes to no tokens; give it some text")
        encoded.append(ids)
    return encoded
