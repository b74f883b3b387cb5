"""Models and prompts for the decoder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UnsupportedModel, VocabcheckError
from ..profile import ModelProfile


def model_directory(profile: ModelProfile) -> Path:
    """The local directory holding a model's weights (hub models are downloaded after the pair passed compare)."""
    if profile.kind == "hub":
        from ..sources.hub import download_weights

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
    or where transformers does not know its model type (loading the model then says so)."""
    from transformers import CONFIG_MAPPING

    data = dict(profile.source.config or {})
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None
    try:
        return CONFIG_MAPPING[model_type].from_dict(data)
    except Exception as exc:  # transformers validates field types with several exception classes
        raise InputError(f"transformers cannot read this config: {str(exc).strip().splitlines()[0][:300]}",
                         profile.provenance.get("config", profile.location)) from exc


@dataclass(frozen=True)
class Prompt:
    text: str | None
    messages: tuple[dict[str, Any], ...] | None = None
    response: str | None = None  # JSONL "response": what the target answered (recorded traffic), for `predict`


def read_prompt_file(path: Path) -> list[Prompt]:
    """One prompt per line, or JSONL: each line a JSON string, or an object with "prompt"/"text" or "messages"."""
    try:
        lines = _lines(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("prompt file not found", path) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read prompt file: {exc}", path) from exc
    jsonl = path.suffix.lower() in (".jsonl", ".json") or all(
        line.lstrip().startswith(("{", '"')) for line in lines if line.strip())
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append(Prompt(line))
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {number} is not JSON ({exc.msg})", path) from exc
        response = value.get("response") if isinstance(value, dict) else None
        if response is not None and not isinstance(response, str):
            raise InputError(f"line {number}: 'response' must be a string", path)
        if isinstance(value, str):
            prompts.append(Prompt(value))
        elif isinstance(value, dict) and isinstance(value.get("messages"), list):
            prompts.append(Prompt(None, tuple(value["messages"]), response))
        elif isinstance(value, dict) and isinstance(value.get("prompt", value.get("text")), str):
            prompts.append(Prompt(value.get("prompt", value.get("text")), response=response))
        else:
            raise InputError(f"line {number} needs a string, or an object with 'prompt', 'text' or 'messages'", path)
    if not prompts:
        raise InputError("prompt file holds no prompts", path)
    return prompts


def _lines(text: str) -> list[str]:
    """Lines split at newline (and CRLF) only: U+2028, U+2029, form feed and the other characters that
    ``str.splitlines`` also breaks at are text inside a prompt."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def encode_prompts(profile: ModelProfile, prompts: Sequence[Prompt], chat: bool) -> list[list[int]]:
    """Token ids for each prompt, with the target's tokenizer (and chat template with ``chat``)."""
    tokenizer = profile.source.tokenizer
    encoded = []
    for prompt in prompts:
        if chat or prompt.messages is not None:
            text = apply_chat_template(profile, prompt.messages or ({"role": "user", "content": prompt.text},))
            ids = tokenizer.encode(text, add_special_tokens=False).ids
        else:
            ids = tokenizer.encode(prompt.text, add_special_tokens=True).ids
        if not ids:
            raise VocabcheckError("a prompt encodes to no tokens; give it some text")
        encoded.append(ids)
    return encoded


def apply_chat_template(profile: ModelProfile, messages: Sequence[dict[str, Any]]) -> str:
    if not profile.chat_template:
        raise InputError("--chat needs a chat template, and the target has none", profile.location)
    from transformers.utils.chat_template_utils import render_jinja_template

    specials = {f"{role}_token": token.content for role in ("bos", "eos", "pad", "unk")
                if (token := profile.specials.role(role)) is not None and token.content is not None}
    try:
        rendered, _ = render_jinja_template(conversations=[list(messages)], chat_template=profile.chat_template,
                                            add_generation_prompt=True, **specials)
    except Exception as exc:  # jinja2 raises many types for a broken template
        raise InputError(f"the chat template fails: {str(exc).splitlines()[0][:200]}",
                         profile.provenance.get("chat_template", profile.location)) from exc
    return rendered[0]
