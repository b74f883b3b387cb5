"""Make a padded-compatible draft fit its target exactly, so that engines which compare ``vocab_size`` accept it.

:func:`align_draft` is ``vocabcheck align``. Its :func:`plan` reads a :class:`vocabcheck.verdict.Comparison` — it
never re-derives compatibility — and refuses unless the verdict is identical or padded-compatible; then it writes a
new draft directory:

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

The checkpoint is rewritten shard by shard in bounded memory by :mod:`vocabcheck.rewrite`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import atomic
from .engines.commands import EngineCommand, ServeOptions, engine_commands
from .errors import InputError, RefusedPair, UnsupportedModel
from .profile import OUTPUT_SUFFIXES
from .text import clip
from .rewrite import CHUNK_BYTES, ShardReport, check_allocation, itemsize, rewrite_checkpoint
from .verdict import Comparison, Verdict

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
    """What :func:`align_draft` will write, decided from the comparison before anything is written."""

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
        """Tensor name → rows it gets, for :func:`vocabcheck.rewrite.rewrite_checkpoint`."""
        return {r.name: r.rows for r in self.resizes}

    @property
    def added_bytes(self) -> int:
        """The bytes of the rows the rewrite adds (what it holds in memory beyond one shard)."""
        return sum(r.added * r.hidden * itemsize(r.dtype) for r in self.resizes)


@dataclass(frozen=True)
class AlignResult:
    plan: AlignPlan
    out: Path
    shards: tuple[ShardReport, ...]
    copied: tuple[str, ...]  # files written besides the shards: "config.json", then "target:<name>", "draft:<name>"
    verdict_after: Verdict  # compare TARGET OUT, run on the finished directory before it replaced --out
    commands: tuple[EngineCommand, ...] = ()  # how vLLM and SGLang serve the target with it (align_draft)


class IncompatiblePair(RefusedPair):
    """align refuses the pair because compare does not call it identical or padded-compatible (exit code 1)."""

    def __init__(self, problem: str, comparison: Comparison):
        super().__init__(problem, comparison.draft.spec)
        self.comparison = comparison


# ---------------------------------------------------------------------------------------------------------------------
# planning


def check_alignable(comparison: Comparison) -> None:
    """Raise :class:`RefusedPair` (exit code 1) unless the verdict is identical or padded-compatible."""
    if comparison.verdict in (Verdict.IDENTICAL, Verdict.PADDED_COMPATIBLE):
        return
    top = "; ".join(f"{f.code}: {clip(' '.join(f.message.split()), 200)}" for f in comparison.top_findings())
    raise IncompatiblePair(f"align refuses an {comparison.verdict.value} pair ({comparison.reason}); {top}",
                           comparison)


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
    source = " (the target's config.json vocab_size)" if alignment.rows_source.startswith("config") else \
        " (the target's checkpoint)"
    check_allocation(((r.rows, r.hidden, r.dtype) for r in resizes), target.spec, source)  # before any allocation

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
                     "logit 0 in the draft (see \"Zero rows\" in docs/align.md)")
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


def _write(plan: AlignPlan, out: Path, *, force: bool, chunk_bytes: int) -> AlignResult:
    """Write the aligned draft into ``out`` (checked by :func:`check_out`) atomically; ``compare TARGET OUT`` is
    checked to be identical first."""
    from .profile import profile_of
    from .verdict import judge

    try:
        with atomic.directory(out, replace=force) as tmp:  # without --force, never onto what another wrote since
            shards = rewrite_checkpoint(plan.draft_dir, plan.shards, plan.index, tmp, plan.rows,
                                        chunk_bytes=chunk_bytes)
            # ASCII, every other character a JSON escape, as transformers' to_json_file writes it: nothing a terminal
            # acts on (a bidi override, a C1 control) reaches `cat config.json`, and it reads back to the same values
            atomic.write_text(tmp / CONFIG, json.dumps(plan.config, indent=2) + "\n")
            copied = [CONFIG]
            for name in plan.tokenizer_files:
                _copy(plan.target_dir / name, tmp / name)
                copied.append(f"target:{name}")
            for name in plan.draft_files:
                _copy(plan.draft_dir / name, tmp / name)
                copied.append(f"draft:{name}")
            after = judge(plan.comparison.target, profile_of(str(tmp)), probe=False)
            if after.verdict is not Verdict.IDENTICAL:  # a bug in align: never leave such a directory behind
                raise RuntimeError(f"the aligned draft compares {after.verdict.value} to the target ({after.reason})")
    except OSError as exc:  # a full disk while a shard is written included: the output is named, not the input
        if isinstance(exc, FileExistsError) and exc.filename == str(out):
            raise InputError("--out exists and is not empty: it was written while align ran; pass --force to "
                             "replace it", out) from exc
        raise InputError(f"cannot write the aligned draft: {exc.strerror or exc}", out) from exc
    return AlignResult(plan=plan, out=out, shards=tuple(shards), copied=tuple(copied), verdict_after=after.verdict)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)


# ---------------------------------------------------------------------------------------------------------------------
# the whole command


def align_draft(target: str, draft: str, out: str | Path, *, force: bool = False, probe: bool = True,
                serve: ServeOptions = ServeOptions(), chunk_bytes: int = CHUNK_BYTES) -> AlignResult:
    """What ``vocabcheck align`` does: check ``serve`` and ``out``, compare ``target`` and ``draft``, write the
    aligned draft into ``out`` (see the module docstring), and give the engines' command lines for the pair.

    Raises :class:`IncompatiblePair` (exit code 1) for a pair that is not identical or padded-compatible, and a
    :class:`vocabcheck.errors.VocabcheckError` (exit code 2) for bad options, an ``out`` it may not replace, or a
    model it cannot align; nothing is written then.
    """
    from . import compare

    serve.check()
    check_out(Path(out), force=force, inputs=tuple(Path(p) for p in (target, draft) if Path(p).exists()))
    result = _write(plan(compare(target, draft, probe=probe)), Path(out), force=force, chunk_bytes=chunk_bytes)
    return dataclasses.replace(result, commands=engine_commands(target, str(out), serve))
