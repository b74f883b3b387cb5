"""Ready command lines for the serving engines that run a target with an aligned draft at scale.

vocabcheck never runs these engines; it prints what to type, built only from the keys and flags their documentation
names. Each table below cites where its keys come from, so a test (with no engine installed) can check that every
command line uses documented names with documented types.

vLLM
    ``vllm serve TARGET [--tensor-parallel-size N] --speculative-config JSON``. The JSON keys are the fields of
    ``SpeculativeConfig``:

    - docs: https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/configuration.md
      ("Configuration Reference", "all accepted keys for the ``--speculative-config`` CLI argument": ``method`` str,
      ``num_speculative_tokens`` int "Must be > 0", ``model`` str "Name or path of the draft model",
      ``draft_tensor_parallel_size`` int "Must be 1 or equal to the target model's tensor parallel size"), and
      https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/draft_model.md (``vllm serve
      ... --speculative-config '{"model": ..., "num_speculative_tokens": 5, "method": "draft_model"}'``);
    - source: https://github.com/vllm-project/vllm/blob/main/vllm/config/speculative.py (read at commit
      002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443): ``num_speculative_tokens: int = Field(default=None, gt=0)``,
      ``model: str | None``, ``method: SpeculativeMethod | None`` (a Literal that includes ``"draft_model"``),
      ``draft_tensor_parallel_size: int | None = Field(default=None, ge=1)`` checked by ``_verify_and_get_draft_tp``
      to be 1 or the target's tensor-parallel size (unset: the target's); a ``tensor_parallel_size`` key inside the
      speculative config is rejected ("Please pass 'draft_tensor_parallel_size' instead"). With
      ``method == "draft_model"``, ``verify_equal_vocab_size_if_draft_model`` raises "Target and draft model should
      have the same vocabulary size" unless both models' ``vocab_size`` agree — the check that an aligned draft
      passes. Unless ``use_heterogeneous_vocab`` is set, vLLM loads the draft with the *target's* tokenizer.

SGLang
    ``python -m sglang.launch_server --model-path TARGET [--tp-size N] --speculative-algorithm STANDALONE
    --speculative-draft-model-path DIR --speculative-num-steps K --speculative-eagle-topk 1
    --speculative-num-draft-tokens K+1``:

    - docs: https://github.com/sgl-project/sglang/blob/main/docs/advanced_features/speculative_decoding.md
      ("Standalone Speculative Decoding (Small Draft Model)" and "Full Parameter Reference": ``--speculative-algorithm``
      str, one of EAGLE, EAGLE3, STANDALONE, NGRAM, NEXTN; ``--speculative-draft-model-path`` str;
      ``--speculative-num-steps`` int; ``--speculative-eagle-topk`` int; ``--speculative-num-draft-tokens`` int, "If
      ``topk=1``, it is adjusted to ``num_steps + 1``"; the three are set together or not at all);
    - source: https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py (``model_path`` →
      ``--model-path``, ``tp_size`` → ``--tp-size`` with alias ``--tensor-parallel-size``, the ``speculative_*``
      fields). The speculative parameter reference lists no tensor-parallel flag of the draft's own: the draft runs
      with the server's ``--tp-size``.

TensorRT-LLM builds engines from checkpoints rather than taking a serve command; build its draft engine from the
aligned directory like any checkpoint. vocabcheck prints no TensorRT-LLM command.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import VocabcheckError

DEFAULT_NUM_SPECULATIVE_TOKENS = 5  # the vLLM draft-model documentation's example value


@dataclass(frozen=True)
class KeySpec:
    """One documented configuration key (or command-line flag) and the type its documentation gives it."""

    name: str
    type: type
    rule: str  # the documented constraint, in words
    minimum: int | None = None
    choices: tuple[str, ...] = ()

    def problems(self, value: Any) -> list[str]:
        """Why ``value`` breaks the documented type or constraint (empty when it does not)."""
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            return [f"{self.name} must be an integer, not {type(value).__name__}"]
        if not isinstance(value, self.type):
            return [f"{self.name} must be a {self.type.__name__}, not {type(value).__name__}"]
        if self.minimum is not None and value < self.minimum:
            return [f"{self.name} must be at least {self.minimum} ({self.rule})"]
        if self.choices and value not in self.choices:
            return [f"{self.name} must be one of {', '.join(self.choices)}"]
        return []


VLLM_DOCS = "https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/configuration.md"
VLLM_SOURCE = ("https://github.com/vllm-project/vllm/blob/002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443/"
               "vllm/config/speculative.py")

# The --speculative-config keys vocabcheck emits, with the names and types vLLM documents (see the module docstring).
VLLM_SPECULATIVE_CONFIG: Mapping[str, KeySpec] = {
    spec.name: spec for spec in (
        KeySpec("model", str, "name or path of the draft model"),
        KeySpec("method", str, "the speculative method; a separate draft model is 'draft_model'",
                choices=("draft_model",)),
        KeySpec("num_speculative_tokens", int, "tokens proposed per step, must be > 0", minimum=1),
        KeySpec("draft_tensor_parallel_size", int, "1 or the target's tensor-parallel size", minimum=1),
    )
}
VLLM_REQUIRED_KEYS = ("model", "method", "num_speculative_tokens")
# vLLM rejects this key inside --speculative-config; the target's tensor parallelism is a vllm serve flag.
VLLM_FORBIDDEN_KEYS = ("tensor_parallel_size",)
VLLM_SERVE_FLAGS: Mapping[str, KeySpec] = {
    "--tensor-parallel-size": KeySpec("--tensor-parallel-size", int, "the target's tensor-parallel size", minimum=1),
    "--speculative-config": KeySpec("--speculative-config", str, "a JSON object of SpeculativeConfig keys"),
}

SGLANG_DOCS = "https://github.com/sgl-project/sglang/blob/main/docs/advanced_features/speculative_decoding.md"
SGLANG_SOURCE = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py"
SGLANG_FLAGS: Mapping[str, KeySpec] = {
    spec.name: spec for spec in (
        KeySpec("--model-path", str, "the target model"),
        KeySpec("--tp-size", int, "the tensor-parallel size (alias --tensor-parallel-size)", minimum=1),
        KeySpec("--speculative-algorithm", str, "a small draft LLM is STANDALONE",
                choices=("EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN")),
        KeySpec("--speculative-draft-model-path", str, "the draft model"),
        KeySpec("--speculative-num-steps", int, "draft depth", minimum=1),
        KeySpec("--speculative-eagle-topk", int, "candidates per step", minimum=1),
        KeySpec("--speculative-num-draft-tokens", int, "verification capacity; num_steps + 1 when topk is 1",
                minimum=1),
    )
}


@dataclass(frozen=True)
class EngineCommand:
    """A command line for one engine, as an argument vector, with notes on what vocabcheck chose and why."""

    engine: str
    argv: tuple[str, ...]
    docs: str
    notes: tuple[str, ...] = ()
    speculative_config: Mapping[str, Any] | None = field(default=None)
    validated_by: str | None = None  # the engine release whose own validator accepted it ("vLLM 0.32.0")

    def shell(self) -> str:
        """The command as one line for a POSIX shell (arguments quoted where needed)."""
        return shlex.join(self.argv)

    def document(self) -> dict[str, Any]:
        return {"engine": self.engine, "command": self.shell(), "argv": list(self.argv), "docs": self.docs,
                "speculative_config": None if self.speculative_config is None else dict(self.speculative_config),
                "notes": list(self.notes), "validated_by": self.validated_by}


@dataclass(frozen=True)
class ServeOptions:
    """What the user asked for: tokens per step and tensor parallelism (``None``: the engine's default)."""

    num_speculative_tokens: int = DEFAULT_NUM_SPECULATIVE_TOKENS
    tensor_parallel_size: int | None = None
    draft_tensor_parallel_size: int | None = None

    def check(self) -> None:
        """Refuse options the engines document as invalid, before any work is done (exit code 2)."""
        if self.num_speculative_tokens < 1:
            raise VocabcheckError("--num-speculative-tokens must be at least 1")
        if self.tensor_parallel_size is not None and self.tensor_parallel_size < 1:
            raise VocabcheckError("--tensor-parallel-size must be at least 1")
        draft_tp = self.draft_tensor_parallel_size
        if draft_tp is not None:
            target_tp = self.tensor_parallel_size or 1
            if draft_tp not in (1, target_tp):
                raise VocabcheckError(f"--draft-tensor-parallel-size must be 1 or the target's tensor-parallel size "
                                      f"({target_tp}); vLLM refuses {draft_tp}")


def speculative_config(draft_dir: str, options: ServeOptions) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` object for a separate draft model."""
    config: dict[str, Any] = {"model": draft_dir, "method": "draft_model",
                              "num_speculative_tokens": options.num_speculative_tokens}
    if options.draft_tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = options.draft_tensor_parallel_size
    problems = check_speculative_config(config, target_tensor_parallel_size=options.tensor_parallel_size or 1)
    if problems:  # the table above and this builder disagree: a bug, not the user's input
        raise AssertionError("; ".join(problems))
    return config


def check_speculative_config(config: Mapping[str, Any], *, target_tensor_parallel_size: int = 1) -> list[str]:
    """Every way ``config`` departs from the documented keys and types (empty when it does not)."""
    problems = [f"unknown key {key!r}" for key in config if key not in VLLM_SPECULATIVE_CONFIG]
    problems += [f"vLLM rejects the key {key!r} in --speculative-config" for key in config if key in
                 VLLM_FORBIDDEN_KEYS]
    problems += [f"missing key {key!r}" for key in VLLM_REQUIRED_KEYS if key not in config]
    for key, value in config.items():
        if key in VLLM_SPECULATIVE_CONFIG:
            problems += VLLM_SPECULATIVE_CONFIG[key].problems(value)
    draft_tp = config.get("draft_tensor_parallel_size")
    if isinstance(draft_tp, int) and draft_tp not in (1, target_tensor_parallel_size):
        problems.append(f"draft_tensor_parallel_size {draft_tp} must be 1 or the target's "
                        f"{target_tensor_parallel_size}")
    return problems


def vllm_command(target: str, draft_dir: str, options: ServeOptions) -> EngineCommand:
    config = speculative_config(draft_dir, options)
    argv: list[str] = ["vllm", "serve", target]
    if options.tensor_parallel_size is not None:
        argv += ["--tensor-parallel-size", str(options.tensor_parallel_size)]
    argv += ["--speculative-config", json.dumps(config, separators=(", ", ": "))]
    notes = ["vLLM loads the draft with the target's tokenizer and requires equal vocab_size for method "
             "'draft_model'; the aligned draft has the target's rows and tokenizer files"]
    if options.draft_tensor_parallel_size is None:
        notes.append("draft_tensor_parallel_size unset: vLLM runs the draft at the target's tensor-parallel size")
    return EngineCommand("vllm", tuple(argv), VLLM_DOCS, tuple(notes), config)


def sglang_command(target: str, draft_dir: str, options: ServeOptions) -> EngineCommand:
    steps = options.num_speculative_tokens
    argv: list[str] = ["python", "-m", "sglang.launch_server", "--model-path", target]
    if options.tensor_parallel_size is not None:
        argv += ["--tp-size", str(options.tensor_parallel_size)]
    argv += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft_dir,
             "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", str(steps + 1)]
    notes = [f"a chain of {steps} draft tokens: topk 1 and num_draft_tokens = num_steps + 1, as SGLang documents"]
    if options.draft_tensor_parallel_size not in (None, options.tensor_parallel_size or 1):
        notes.append(f"SGLang documents no draft tensor-parallel option: the draft runs with --tp-size "
                     f"{options.tensor_parallel_size or 1}, not {options.draft_tensor_parallel_size}")
    return EngineCommand("sglang", tuple(argv), SGLANG_DOCS, tuple(notes))


def check_flags(argv: Sequence[str], flags: Mapping[str, KeySpec]) -> list[str]:
    """Every ``--flag value`` pair in ``argv`` that is not in ``flags`` or whose value does not parse as its type."""
    problems: list[str] = []
    items = list(argv)
    start = next((i for i, a in enumerate(items) if a.startswith("--")), len(items))
    pairs = items[start:]
    if len(pairs) % 2:
        return [f"flags and values do not pair up: {pairs!r}"]
    for name, raw in zip(pairs[::2], pairs[1::2]):
        spec = flags.get(name)
        if spec is None:
            problems.append(f"undocumented flag {name}")
            continue
        value: Any = raw
        if spec.type is int:
            try:
                value = int(raw)
            except ValueError:
                problems.append(f"{name} takes an integer, got {raw!r}")
                continue
        problems += spec.problems(value)
    return problems


def engine_commands(target: str, draft_dir: str, options: ServeOptions) -> tuple[EngineCommand, ...]:
    """The vLLM and SGLang command lines that serve ``target`` with the aligned draft in ``draft_dir``."""
    options.check()
    return vllm_command(target, draft_dir, options), sglang_command(target, draft_dir, options)
