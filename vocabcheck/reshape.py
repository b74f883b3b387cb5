"""Make a padded-compatible draft fit its target exactly, so that engines which compare ``vocab_size`` accept it.

:func:`plan` reads a :class:`vocabcheck.verdict.Comparison` — it never re-derives compatibility — and refuses unless
the verdict is identical or padded-compatible. :func:`write_aligned` then writes a new draft directory:

- the input embedding gets the target's input rows and ``lm_head`` the target's output rows. Rows both sides have are
  copied bit for bit; rows the draft lacks are added as zeros in both (a zero ``lm_head`` row gives logit 0); rows
  the target lacks are dropped (the alignment's shared ranges never reach them, so no id both models can produce is
  lost). A tied draft stays tied: one matrix, no ``lm_head`` tensor;
- every other tensor is copied byte for byte with its dtype, shard by shard, into files of the same names; the
  safetensors metadata (``format: pt``) is kept and the shard index rewritten;
- ``config.json`` is the draft's with ``vocab_size`` set to the target's rows; the target's tokenizer files (and
  chat templates) replace the draft's; the draft's ``generation_config.json`` and licence/readme files are kept;
- it all happens in a temporary sibling directory that replaces ``--out`` only after ``compare TARGET OUT`` has said
  *identical* (:mod:`vocabcheck.atomic`).

Memory: tensors are streamed through ``safetensors.safe_open`` (memory-mapped, read lazily) and ``save_file`` one
shard at a time. A resized matrix is built in a new buffer from chunks read through short-lived mappings, so its
source pages do not stay resident. The peak resident memory of the rewrite above the process's baseline is at most

    largest shard + rows added (bytes) + one chunk (``chunk_bytes``, 64 MiB) + MEMORY_SLACK_BYTES (32 MiB)

whatever the size of the model (``tests/test_align.py`` measures it; ``reports/align.md`` has the figures).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import atomic
from .errors import InputError, RefusedPair, UnsupportedModel
from .profile import OUTPUT_SUFFIXES
from .verdict import Comparison, Verdict

CHUNK_BYTES = 64 * 1024 * 1024
MEMORY_SLACK_BYTES = 32 * 1024 * 1024

SAFETENSORS_INDEX = "model.safetensors.index.json"
# Files that define the tokenizer: the aligned draft takes the target's and none of the draft's.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "merges.txt", "vocab.txt")
TOKENIZER_DIRS = ("additional_chat_templates",)
# Files of the draft that travel with its weights (licence obligations, model card).
DRAFT_NOTICE_PREFIXES = ("license", "licence", "notice", "readme", "use_policy")
GENERATION_CONFIG = "generation_config.json"
CONFIG = "config.json"
TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


@dataclass(frozen=True)
class Resize:
    """One vocabulary matrix of the draft and the rows it gets."""

    name: str
    file: str  # the shard, relative to the draft directory
    role: str  # "input embedding" or "lm_head"
    source_rows: int
    rows: int
    hidden: int
    dtype: str

    @property
    def kept(self) -> int:
        return min(self.source_rows, self.rows)

    @property
    def added(self) -> int:
        return max(0, self.rows - self.source_rows)

    @property
    def dropped(self) -> int:
        return max(0, self.source_rows - self.rows)


@dataclass(frozen=True)
class AlignPlan:
    """What :func:`write_aligned` will do, decided from the comparison before anything is written."""

    comparison: Comparison = field(repr=False)
    target_dir: Path
    draft_dir: Path
    target_rows: int
    target_input_rows: int
    tied: bool
    resizes: tuple[Resize, ...]
    shards: tuple[str, ...]  # relative to the draft directory, in order
    index: str | None
    config: Mapping[str, Any]  # the draft's config.json with vocab_size (and out-of-range token ids) updated
    tokenizer_files: tuple[str, ...]  # names in the target directory
    draft_files: tuple[str, ...]  # names in the draft directory copied unchanged
    left_out: tuple[str, ...]  # names in the draft directory not carried over
    draft_tokens_cut: int  # tokens of the draft's tokenizer whose rows the target lacks
    notes: tuple[str, ...]

    @property
    def rows(self) -> dict[str, int]:
        """Tensor name → rows it gets, for :func:`rewrite_checkpoint`."""
        return {r.name: r.rows for r in self.resizes}


@dataclass(frozen=True)
class ShardReport:
    file: str
    tensors: int
    bytes: int  # tensor data bytes written
    parameters: int
    resized: tuple[str, ...]


@dataclass(frozen=True)
class AlignResult:
    plan: AlignPlan
    out: Path
    shards: tuple[ShardReport, ...]
    copied: tuple[str, ...]  # files written besides the shards: "config.json", then "target:<name>", "draft:<name>"
    verdict_after: Verdict  # compare TARGET OUT, run on the finished directory before it replaced --out


# ---------------------------------------------------------------------------------------------------------------------
# planning


def check_alignable(comparison: Comparison) -> None:
    """Raise :class:`RefusedPair` (exit code 1) unless the verdict is identical or padded-compatible."""
    if comparison.verdict in (Verdict.IDENTICAL, Verdict.PADDED_COMPATIBLE):
        return
    top = "; ".join(f"{f.code}: {_clip(f.message)}" for f in comparison.top_findings())
    raise RefusedPair(f"align refuses an {comparison.verdict.value} pair ({comparison.reason}); {top}",
                      comparison.draft.spec)


def plan(comparison: Comparison) -> AlignPlan:
    """Decide how to align the draft of ``comparison`` to its target; raises before anything is written."""
    check_alignable(comparison)
    target, draft, alignment = comparison.target, comparison.draft, comparison.alignment
    if target.kind != "directory":
        raise UnsupportedModel("align needs the target as a model directory (its tokenizer files are copied and "
                               "its rows come from its checkpoint or config.json)", target.spec)
    if alignment.rows_source.split("/")[0] not in ("tensors", "config"):
        raise UnsupportedModel("the target has neither a checkpoint nor a config.json vocab_size, so its row count "
                               "is unknown", target.spec)
    if draft.kind != "directory" or draft.embeddings.source != "tensors":
        raise UnsupportedModel("align rewrites the draft's weights: the draft must be a model directory with a "
                               "safetensors checkpoint", draft.spec)
    target_dir, draft_dir = Path(target.location), Path(draft.location)
    t_out, t_in = alignment.target_rows, alignment.target_input_rows
    if t_in != t_out:
        raise UnsupportedModel(f"the target's input embedding has {t_in:,} rows but its lm_head {t_out:,}; align "
                               "gives the draft one row count (config.json vocab_size) for both", target.spec)
    for start, end in alignment.shared_ranges:  # the verdict guarantees it; cutting a shared row would lose an id
        if end > t_out:
            raise RefusedPair(f"shared ids {start}–{end - 1} reach beyond the target's {t_out:,} rows", draft.spec)

    weights = tuple(Path(w) for w in draft.source.weights)
    if not weights or any(w.suffix != ".safetensors" for w in weights):
        names = ", ".join(w.name for w in weights) or "none"
        raise UnsupportedModel(f"align streams safetensors checkpoints only (found: {names}); convert the draft to "
                               "safetensors first", draft_dir)
    shards = tuple(str(w.relative_to(draft_dir)) for w in weights)
    index = SAFETENSORS_INDEX if (draft_dir / SAFETENSORS_INDEX).is_file() else None

    tensors = draft.source.tensors or {}
    emb = draft.embeddings
    resizes = []
    if emb.input_tensor is None:
        raise UnsupportedModel("the draft's checkpoint has no input embedding that vocabcheck recognises", draft_dir)
    resizes.append(_resize(tensors[emb.input_tensor], "input embedding", t_in, draft_dir))
    heads = [emb.output_tensor] if emb.output_tensor else []
    if emb.tied:  # a tied checkpoint that also stores a copy of the head: keep the copy the same shape
        heads = [name for name, t in tensors.items() if len(t.shape) == 2 and t.shape[0] == emb.input_rows
                 and name != emb.input_tensor and any(name == s or name.endswith("." + s) for s in OUTPUT_SUFFIXES)]
    resizes += [_resize(tensors[name], "lm_head", t_out, draft_dir) for name in heads]
    vocab_rows = {r.source_rows for r in resizes}
    for name, t in tensors.items():
        if name not in {r.name for r in resizes} and any(d in vocab_rows for d in t.shape):
            raise UnsupportedModel(f"tensor {name} {list(t.shape)} has a vocabulary-sized dimension (a logits bias or "
                                   "a quantisation scale?); align only resizes the input embedding and lm_head",
                                   draft_dir)

    config, notes = _config(draft, target, t_out)
    draft_tokens_cut = sum(1 for i, _ in comparison.vocab.draft_only if i >= t_out)
    if any(r.dropped for r in resizes):
        dropped = max(r.dropped for r in resizes)
        notes.append(f"dropped the draft's rows {t_out:,}–{t_out + dropped - 1:,}: the target has no such ids"
                     + (f" ({draft_tokens_cut:,} of them are tokens only the draft's tokenizer has; the target "
                        "could never accept them)" if draft_tokens_cut else " (padding rows)"))
    if any(r.added for r in resizes):
        added = max(r.added for r in resizes)
        notes.append(f"added {added:,} zero rows ({min(r.source_rows for r in resizes):,}–{t_out - 1:,}); each gives "
                     "logit 0 in the draft (see \"Zero rows\" under align in the README)")
    if all(r.rows == r.source_rows for r in resizes):
        notes.append("the draft already has the target's rows: its tensors are copied unchanged")
    notes += _generation_note(draft, target)

    tokenizer_files = tuple(n for n in TOKENIZER_FILES if (target_dir / n).is_file())
    tokenizer_files += tuple(n for n in TOKENIZER_DIRS if (target_dir / n).is_dir())
    carried = set(shards) | {CONFIG} | ({index} if index else set())
    draft_files = tuple(sorted(
        p.name for p in draft_dir.iterdir() if p.is_file() and p.name not in carried
        and (p.name == GENERATION_CONFIG or p.name.lower().startswith(DRAFT_NOTICE_PREFIXES))))
    replaced = set(TOKENIZER_FILES) | set(TOKENIZER_DIRS)  # the draft's tokenizer: the target's takes its place
    left_out = tuple(sorted(p.name for p in draft_dir.iterdir()
                            if p.name not in carried | replaced | set(draft_files) and not p.name.startswith(".")))
    return AlignPlan(
        comparison=comparison, target_dir=target_dir, draft_dir=draft_dir, target_rows=t_out,
        target_input_rows=t_in, tied=bool(emb.tied), resizes=tuple(resizes), shards=shards, index=index,
        config=config, tokenizer_files=tokenizer_files, draft_files=draft_files, left_out=left_out,
        draft_tokens_cut=draft_tokens_cut, notes=tuple(notes),
    )


def _resize(tensor, role: str, rows: int, where: Path) -> Resize:
    if len(tensor.shape) != 2:
        raise UnsupportedModel(f"{role} {tensor.name} has shape {list(tensor.shape)}; expected [rows, hidden]", where)
    return Resize(name=tensor.name, file=tensor.file, role=role, source_rows=tensor.shape[0], rows=rows,
                  hidden=tensor.shape[1], dtype=tensor.dtype)


def _config(draft, target, rows: int) -> tuple[dict[str, Any], list[str]]:
    """The draft's config.json with vocab_size set to ``rows``; token ids the new rows cannot embed are replaced."""
    if draft.source.config is None:
        raise UnsupportedModel("the draft has no config.json; transformers and the engines need one",
                               draft.location)
    config = json.loads(json.dumps(dict(draft.source.config)))  # a deep, JSON-clean copy
    target_config = dict(target.source.config or {})
    notes: list[str] = []
    sections = [config] + ([config["text_config"]] if isinstance(config.get("text_config"), dict) else [])
    holders = [s for s in sections if "vocab_size" in s] or [config]
    for section in holders:
        before = section.get("vocab_size")
        section["vocab_size"] = rows
        if before != rows:
            notes.append(f"config.json vocab_size {before} → {rows}")
    for section in sections:
        for key in TOKEN_ID_KEYS:
            value = section.get(key)
            ids = value if isinstance(value, list) else [value]
            if any(isinstance(i, int) and i >= rows for i in ids):
                section[key] = target_config.get(key)
                notes.append(f"config.json {key} {value} is beyond the new rows; set to the target's "
                             f"{section[key]}")
    return config, notes


def _generation_note(draft, target) -> list[str]:
    if draft.source.generation_config is None:
        return ["the draft has no generation_config.json; engines take sampling defaults from the target"]
    note = ("kept the draft's generation_config.json (its own sampling defaults when run alone); vLLM and SGLang "
            "take sampling defaults and stop tokens from the target")
    if draft.generation_eos and target.generation_eos and set(draft.generation_eos) != set(target.generation_eos):
        note += (f"; its eos ids {list(draft.generation_eos)} differ from the target's "
                 f"{list(target.generation_eos)}")
    return [note]


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------------------------------
# writing


def check_out(out: Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse an output directory that would replace an input, or that holds files and ``force`` is off (exit 2)."""
    out = Path(out)
    resolved = out.resolve()
    for path in inputs:
        p = Path(path).resolve()
        if p == resolved or resolved in p.parents:
            raise InputError("--out would replace an input model; choose a new directory", out)
    if out.exists() and not out.is_dir():
        raise InputError("--out exists and is not a directory", out)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError("--out exists and is not empty; pass --force to replace it", out)


def write_aligned(plan: AlignPlan, out: str | Path, *, force: bool = False,
                  chunk_bytes: int = CHUNK_BYTES) -> AlignResult:
    """Write the aligned draft into ``out`` atomically; ``compare TARGET OUT`` is checked to be identical first."""
    from .profile import build_profile
    from .sources import open_model
    from .verdict import judge

    out = Path(out)
    check_out(out, force=force, inputs=(plan.target_dir, plan.draft_dir))
    try:
        with atomic.directory(out) as tmp:
            shards = rewrite_checkpoint(plan.draft_dir, plan.shards, plan.index, tmp, plan.rows,
                                        chunk_bytes=chunk_bytes)
            atomic.write_text(tmp / CONFIG, json.dumps(plan.config, indent=2, ensure_ascii=False) + "\n")
            copied = [CONFIG]
            for name in plan.tokenizer_files:
                _copy(plan.target_dir / name, tmp / name)
                copied.append(f"target:{name}")
            for name in plan.draft_files:
                _copy(plan.draft_dir / name, tmp / name)
                copied.append(f"draft:{name}")
            after = judge(plan.comparison.target, build_profile(open_model(str(tmp))), probe=False)
            if after.verdict is not Verdict.IDENTICAL:  # a bug in align: never leave such a directory behind
                raise RuntimeError(f"the aligned draft compares {after.verdict.value} to the target ({after.reason})")
    except OSError as exc:
        raise InputError(f"cannot write the aligned draft: {exc.strerror or exc}", out) from exc
    return AlignResult(plan=plan, out=out, shards=tuple(shards), copied=tuple(copied), verdict_after=after.verdict)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)


def rewrite_checkpoint(draft_dir: Path, shards: tuple[str, ...], index: str | None, out_dir: Path,
                       rows: Mapping[str, int], *, chunk_bytes: int = CHUNK_BYTES) -> list[ShardReport]:
    """Rewrite every shard (same file names) and, when there is one, the shard index."""
    reports = []
    for name in shards:
        dst = out_dir / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        reports.append(rewrite_shard(draft_dir / name, dst, rows, chunk_bytes=chunk_bytes))
    if index is not None:
        source = json.loads((draft_dir / index).read_text(encoding="utf-8"))
        written = _written_names(out_dir, shards)
        source["weight_map"] = dict(sorted(written.items()))
        metadata = dict(source.get("metadata") or {})
        metadata["total_size"] = sum(r.bytes for r in reports)
        if "total_parameters" in metadata:
            metadata["total_parameters"] = sum(r.parameters for r in reports)
        source["metadata"] = metadata
        atomic.write_text(out_dir / index, json.dumps(source, indent=2) + "\n")
    return reports


def _written_names(out_dir: Path, shards: tuple[str, ...]) -> dict[str, str]:
    from safetensors import safe_open

    names: dict[str, str] = {}
    for shard in shards:
        with safe_open(str(out_dir / shard), framework="pt") as f:
            names.update({key: shard for key in f.keys()})
    return names


def rewrite_shard(src: Path, dst: Path, rows: Mapping[str, int], *, chunk_bytes: int = CHUNK_BYTES) -> ShardReport:
    """Copy one safetensors file, giving each tensor named in ``rows`` that many rows.

    Other tensors are memory-mapped and written as they are (same bytes, same dtype); the metadata is kept.
    """
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file

    try:
        return _rewrite_shard(src, dst, rows, chunk_bytes, safe_open, save_file)
    except SafetensorError as exc:
        raise InputError(f"cannot read safetensors file: {exc}", src) from exc


def _rewrite_shard(src: Path, dst: Path, rows: Mapping[str, int], chunk_bytes: int, safe_open, save_file):
    resized = []
    with safe_open(str(src), framework="pt") as f:
        metadata = dict(f.metadata() or {})
        metadata.setdefault("format", "pt")
        tensors = {}
        for name in f.keys():
            if name in rows:
                tensors[name] = _resized(src, name, rows[name], chunk_bytes)
                resized.append(name)
            else:
                tensors[name] = f.get_tensor(name)
        save_file(tensors, str(dst), metadata=metadata)
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        parameters = sum(t.numel() for t in tensors.values())
        count = len(tensors)
        del tensors
    return ShardReport(file=dst.name, tensors=count, bytes=size, parameters=parameters, resized=tuple(resized))


def _resized(src: Path, name: str, rows: int, chunk_bytes: int):
    """A new [rows, hidden] tensor: the source's rows copied bit for bit, then zero rows.

    The source is read in chunks, each through a mapping that is closed at once, so at most one chunk of the old
    matrix is resident next to the new one.
    """
    import torch
    from safetensors import safe_open

    with safe_open(str(src), framework="pt") as f:
        view = f.get_slice(name)
        shape = view.get_shape()
        dtype = f.get_tensor(name).dtype  # a lazy mapping: only the dtype is read
    if len(shape) != 2:
        raise UnsupportedModel(f"{name} has shape {list(shape)}; expected [rows, hidden]", src)
    source_rows, hidden = shape
    result = torch.empty((rows, hidden), dtype=dtype)
    keep = min(rows, source_rows)
    step = max(1, chunk_bytes // max(1, hidden * result.element_size()))
    for start in range(0, keep, step):
        stop = min(keep, start + step)
        with safe_open(str(src), framework="pt") as f:
            result[start:stop].copy_(f.get_slice(name)[start:stop])
    result[keep:].zero_()
    return result


# ---------------------------------------------------------------------------------------------------------------------
# the whole command


def align(target: str, draft: str, out: str | Path, *, force: bool = False, probe: bool = True,
          chunk_bytes: int = CHUNK_BYTES) -> AlignResult:
    """Compare ``target`` and ``draft``, then write the aligned draft into ``out`` (see the module docstring)."""
    from . import compare

    check_out(Path(out), force=force, inputs=tuple(Path(p) for p in (target, draft) if Path(p).exists()))
    return write_aligned(plan(compare(target, draft, probe=probe)), out, force=force, chunk_bytes=chunk_bytes)


def memory_bound(largest_shard_bytes: int, plan: AlignPlan, chunk_bytes: int = CHUNK_BYTES) -> int:
    """The stated ceiling on the rewrite's peak resident memory above its baseline, in bytes."""
    added = sum(r.added * r.hidden * _itemsize(r.dtype) for r in plan.resizes)
    return largest_shard_bytes + added + chunk_bytes + MEMORY_SLACK_BYTES


def _itemsize(dtype: str) -> int:
    digits = "".join(c for c in dtype if c.isdigit())
    if dtype.upper() in ("BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2"):
        return 1
    return max(1, int(digits) // 8) if digits else 4


# ---------------------------------------------------------------------------------------------------------------------
# the JSON document of ``vocabcheck align --json`` (schema: schemas/align-1.json)

ALIGN_SCHEMA = "vocabcheck.align/1"


def align_document(result: AlignResult, commands=()) -> dict[str, Any]:
    """The ``vocabcheck.align/1`` document of a finished alignment and the engine command lines for it."""
    plan = result.plan
    document = _pair_document(plan.comparison, status="aligned", exit_code=0)
    document.update({
        "out": str(result.out),
        "aligned": {
            "verdict_after": result.verdict_after.value,
            "target_rows": plan.target_rows,
            "target_input_rows": plan.target_input_rows,
            "config_vocab_size": plan.target_rows,
            "tied": plan.tied,
            "tensors": [{"name": r.name, "role": r.role, "file": r.file, "dtype": r.dtype, "hidden": r.hidden,
                         "source_rows": r.source_rows, "rows": r.rows, "kept_rows": r.kept, "added_rows": r.added,
                         "dropped_rows": r.dropped} for r in plan.resizes],
            "shards": [{"file": s.file, "tensors": s.tensors, "bytes": s.bytes, "parameters": s.parameters,
                        "resized": list(s.resized)} for s in result.shards],
            "index": plan.index,
            "copied": list(result.copied),
            "left_out": list(plan.left_out),
            "draft_tokens_cut": plan.draft_tokens_cut,
            "generation_config": "draft" if GENERATION_CONFIG in plan.draft_files else None,
        },
        "commands": [c.document() for c in commands],
        "notes": list(plan.notes),
    })
    return document


def refusal_document(comparison: Comparison, out: str | Path | None) -> dict[str, Any]:
    """The ``vocabcheck.align/1`` document of a pair that align refuses (exit code 1)."""
    document = _pair_document(comparison, status="refused", exit_code=1)
    document.update({"out": None if out is None else str(out), "aligned": None, "commands": [],
                     "notes": [f"{f.code}: {f.message}" for f in comparison.top_findings()]})
    return document


def _pair_document(comparison: Comparison, *, status: str, exit_code: int) -> dict[str, Any]:
    from . import __version__
    from .render.data import alignment_document, finding_document

    return {
        "schema": ALIGN_SCHEMA,
        "vocabcheck_version": __version__,
        "status": status,
        "exit_code": exit_code,
        "target": {"spec": comparison.target.spec, "location": comparison.target.location},
        "draft": {"spec": comparison.draft.spec, "location": comparison.draft.location},
        "verdict": comparison.verdict.value,
        "reason": comparison.reason,
        "findings": [finding_document(f) for f in comparison.findings],
        "alignment": alignment_document(comparison.alignment),
    }
