"""What the fuzz suite feeds vocabcheck, and what it runs on each input.

Every input is derived from the real fixtures: the Qwen2.5 tokenizer.json (rebuilt from ``qwen.tiktoken``), the
Qwen2.5-shaped model directories (``qwen_pair``: config.json, tokenizer_config.json, generation_config.json, sharded
and single safetensors) and GGUF files written the way llama.cpp writes them. Most targets use a *small* tokenizer
cut from the real one (its first 512 byte-level BPE tokens, the merges among them, and all 22 added tokens re-numbered
after them, with the real pre-tokenizer, normalizer, post-processor and decoder) so that one input costs milliseconds;
``tokenizer-full`` mutates the full 151,665-token file.

The parent process builds the inputs (:meth:`Materials.make`); a worker process runs them (:func:`run_case`), so that
a hang can be killed and memory measured (``tests/support/fuzz_worker.py``).
"""

from __future__ import annotations

import copy
import io
import json
import shutil
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from . import fuzz_kept
from . import fuzz_mutate as fm
from .gguf_export import qwen_gguf

QWEN_FIRST_ADDED = 151643
SMALL_REGULAR = 512
SMALL_ADDED = 22
SMALL_ROWS = 544  # 512 + 22 padded to a multiple of 32, as Qwen pads its embedding matrices

# target name -> (what it mutates, seconds one input may take, bytes of memory one input may add)
TARGETS: dict[str, tuple[str, float, int]] = {
    "tokenizer-small": ("tokenizer.json cut from Qwen2.5 (534 ids), bare file", 20.0, 512 << 20),
    "tokenizer-full": ("the full Qwen2.5 tokenizer.json (151,665 ids), bare file", 60.0, 2048 << 20),
    "tokenizer-pipeline": ("the small tokenizer.json with a hostile decoder and normalizer: steps (up to 10,002), "
                           "counts (Strip up to 2⁶⁴ − 1), string lengths (up to 300,000 characters)", 30.0, 1024 << 20),
    "configs": ("config.json / tokenizer_config.json / generation_config.json / special_tokens_map.json / "
                "chat_template.json of a model directory", 20.0, 512 << 20),
    "slow-tokenizer": ("vocab.json / merges.txt / tokenizer_config.json of a directory without tokenizer.json "
                       "(converted by transformers)", 30.0, 1024 << 20),
    "safetensors": ("the header of the Qwen2.5-0.5B-shaped model.safetensors (real tensor table, sparse data)",
                    20.0, 512 << 20),
    "index": ("model.safetensors.index.json / pytorch_model.bin.index.json of the sharded Qwen2.5-7B-shaped "
              "model, shard names and symlinks", 20.0, 512 << 20),
    "pytorch-bin": ("a torch.save zip checkpoint (pickle, storages, records), loaded with weights_only", 20.0,
                    512 << 20),
    "tiktoken-small": ("a tiktoken ranks file: the first 512 ranks of qwen.tiktoken", 30.0, 512 << 20),
    "gguf-small": ("a GGUF file of the small Qwen2.5 tokenizer, written as llama.cpp writes it", 30.0, 1024 << 20),
    "gguf-full": ("the Qwen2.5-0.5B-shaped GGUF (151,936 tokens, padded as llama.cpp pads)", 90.0, 3072 << 20),
    **fuzz_kept.TARGETS,  # the files a run reads beside the models: kept state and prompt files
}


@dataclass(frozen=True)
class Case:
    target: str
    mutant: str  # the path to open (file or directory)
    reference: str  # its unmutated original
    swap: bool  # compare(reference, mutant) instead of compare(mutant, reference)
    note: str = ""


def remap_id(value: Any) -> Any:
    """A Qwen2.5 id in the small tokenizer's numbering (added tokens follow the 512 regular ones)."""
    if type(value) is int and value >= QWEN_FIRST_ADDED:
        return SMALL_REGULAR + value - QWEN_FIRST_ADDED
    if isinstance(value, list):
        return [remap_id(v) for v in value]
    return value


def small_tokenizer(full: dict[str, Any]) -> dict[str, Any]:
    vocab = {token: i for token, i in full["model"]["vocab"].items() if i < SMALL_REGULAR}
    merges = [m for m in full["model"]["merges"]
              if (pair := (m.split(" ", 1) if isinstance(m, str) else m)) and pair[0] in vocab and pair[1] in vocab
              and pair[0] + pair[1] in vocab]
    document = {key: value for key, value in full.items() if key not in ("model", "added_tokens")}
    document["added_tokens"] = [dict(a, id=remap_id(a["id"])) for a in full["added_tokens"]]
    document["model"] = dict(full["model"], vocab=vocab, merges=merges)
    return document


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def small_safetensors(header: dict[str, Any], rows: int) -> bytes:
    """A safetensors file with the real draft's tensor table, the vocabulary dimension cut to ``rows``."""
    widths = {"F32": 4, "F16": 2, "BF16": 2}
    out: dict[str, Any] = {"__metadata__": header.get("__metadata__", {"format": "pt"})}
    offset = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = list(info["shape"])
        if shape and shape[0] >= QWEN_FIRST_ADDED:
            shape[0] = rows
        size = widths[info["dtype"]]
        for dim in shape:
            size *= dim
        out[name] = {"dtype": info["dtype"], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    body = json.dumps(out, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body + bytes(offset)


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return header, path.stat().st_size - 8 - length


def torch_checkpoint(rows: int, hidden: int = 8) -> bytes:
    import torch

    state = {"model.embed_tokens.weight": torch.zeros(rows, hidden), "lm_head.weight": torch.zeros(rows, hidden),
             "model.norm.weight": torch.ones(hidden)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


class Materials:
    """The unmutated originals, built once into ``root`` from the real fixtures."""

    def __init__(self, root: Path, *, qwen_json: Path, draft_dir: Path, target_dir: Path):
        self.root = root
        self.qwen_json = qwen_json
        self.draft_dir = draft_dir
        self.target_dir = target_dir
        root.mkdir(parents=True, exist_ok=True)
        self.full_text = qwen_json.read_text(encoding="utf-8")
        full = json.loads(self.full_text)

        # a small tokenizer cut from the real one, and a small model directory around it
        self.small_doc = small_tokenizer(full)
        self.small_json = write_json(root / "small-tokenizer.json", self.small_doc)
        self.small_text = self.small_json.read_text(encoding="utf-8")
        self.model_dir = root / "small-model"
        self.model_dir.mkdir(exist_ok=True)
        shutil.copyfile(self.small_json, self.model_dir / "tokenizer.json")
        config = json.loads((draft_dir / "config.json").read_text(encoding="utf-8"))
        self.config = {k: remap_id(v) if k.endswith("_token_id") else v for k, v in config.items()}
        self.config["vocab_size"] = SMALL_ROWS
        tokenizer_config = json.loads((draft_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokenizer_config["added_tokens_decoder"] = {str(remap_id(int(k))): v for k, v in
                                                    tokenizer_config.get("added_tokens_decoder", {}).items()}
        self.tokenizer_config = tokenizer_config
        generation = json.loads((draft_dir / "generation_config.json").read_text(encoding="utf-8"))
        self.generation_config = {k: remap_id(v) for k, v in generation.items()}
        self.special_tokens_map = {role: tokenizer_config[role] for role in
                                   ("bos_token", "eos_token", "pad_token", "unk_token")
                                   if isinstance(tokenizer_config.get(role), (str, dict))}
        self.special_tokens_map["additional_special_tokens"] = ["<|im_start|>", "<|im_end|>"]
        self.chat_template_json = {"chat_template": tokenizer_config.get("chat_template") or "{{ messages }}"}
        write_json(self.model_dir / "config.json", self.config)
        write_json(self.model_dir / "tokenizer_config.json", self.tokenizer_config)
        write_json(self.model_dir / "generation_config.json", self.generation_config)
        self.draft_header, self.draft_data_bytes = read_safetensors_header(draft_dir / "model.safetensors")
        (self.model_dir / "model.safetensors").write_bytes(small_safetensors(self.draft_header, SMALL_ROWS))

        # the slow-tokenizer files transformers converts (GPT-2 style vocab.json + merges.txt)
        self.slow_vocab = dict(self.small_doc["model"]["vocab"])
        self.slow_merges = "#version: 0.2\n" + "".join(
            f"{a} {b}\n" for a, b in (m.split(" ", 1) if isinstance(m, str) else m
                                      for m in self.small_doc["model"]["merges"]))
        self.slow_tokenizer_config = dict(self.tokenizer_config, tokenizer_class="Qwen2Tokenizer")
        self.slow_dir = root / "small-slow"
        self.slow_dir.mkdir(exist_ok=True)
        write_json(self.slow_dir / "vocab.json", self.slow_vocab)
        (self.slow_dir / "merges.txt").write_text(self.slow_merges, encoding="utf-8")
        write_json(self.slow_dir / "tokenizer_config.json", self.slow_tokenizer_config)
        write_json(self.slow_dir / "config.json", self.config)

        # the sharded target: its real index; the shards are the real files
        self.index = json.loads((target_dir / "model.safetensors.index.json").read_text(encoding="utf-8"))
        self.shards = sorted(set(self.index["weight_map"].values()))
        self.index_dir = root / "sharded-model"
        self.index_dir.mkdir(exist_ok=True)
        for name in ("tokenizer.json", "config.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copyfile(self.model_dir / name, self.index_dir / name)
        for shard in self.shards:
            link = self.index_dir / shard
            if not link.is_symlink():
                link.symlink_to((target_dir / shard).resolve())
        write_json(self.index_dir / "model.safetensors.index.json", self.index)

    # built on first use: torch, gguf and the 8 MB GGUF file cost seconds

    @cached_property
    def tiktoken_small(self) -> Path:
        from vocabcheck.demo import qwen

        lines = qwen.tiktoken_file().read_bytes().splitlines()[:SMALL_REGULAR]
        path = self.root / "small.tiktoken"
        path.write_bytes(b"\n".join(lines) + b"\n")
        return path

    @cached_property
    def torch_bytes(self) -> bytes:
        return torch_checkpoint(SMALL_ROWS)

    @cached_property
    def bin_dir(self) -> Path:
        directory = self.root / "small-bin"
        directory.mkdir(exist_ok=True)
        for name in ("tokenizer.json", "config.json", "tokenizer_config.json"):
            shutil.copyfile(self.model_dir / name, directory / name)
        (directory / "pytorch_model.bin").write_bytes(self.torch_bytes)
        return directory

    @cached_property
    def gguf_small(self) -> Path:
        """The small model as llama.cpp writes it."""
        path = self.root / "small.gguf"
        if not path.is_file():
            qwen_gguf(self.model_dir, path, pad=True)
        return path

    @cached_property
    def gguf_small_layout(self) -> tuple[bytes, fm.GGUFLayout]:
        data = self.gguf_small.read_bytes()
        return data, fm.GGUFLayout(data)

    @cached_property
    def gguf_full(self) -> Path:
        """The real Qwen2.5-0.5B-shaped draft directory as llama.cpp writes it (151,936 tokens)."""
        path = self.root / "qwen2.5-0.5b-padded.gguf"
        if not path.is_file():
            qwen_gguf(self.draft_dir, path, pad=True)
        return path

    @cached_property
    def gguf_full_layout(self) -> tuple[bytes, fm.GGUFLayout]:
        data = self.gguf_full.read_bytes()
        return data, fm.GGUFLayout(data)

    @cached_property
    def state_documents(self) -> dict[str, dict[str, Any]]:
        return fuzz_kept.state_documents()

    @cached_property
    def prompt_lines(self) -> list[Any]:
        return fuzz_kept.prompt_lines(Path(__file__).resolve().parents[2] / "benchmarks" / "prompts-16.jsonl")

    # --- one input --------------------------------------------------------------------------------------------

    def make(self, target: str, chooser: fm.Chooser, scratch: Path) -> Case:
        """Write one mutated input for ``target`` into the empty directory ``scratch``."""
        return getattr(self, "_" + target.replace("-", "_"))(chooser, scratch)

    def _case(self, target: str, chooser: fm.Chooser, mutant: Path, reference: Path, note: str = "") -> Case:
        return Case(target, str(mutant), str(reference), swap=chooser.chance(1, 3), note=note)

    def _tokenizer_small(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path = scratch / "tokenizer.json"
        path.write_bytes(fm.mutate_json_file(chooser, json.loads(self.small_text)))
        return self._case("tokenizer-small", chooser, path, self.small_json)

    def _tokenizer_full(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path = scratch / "tokenizer.json"
        path.write_bytes(fm.mutate_json_file(chooser, json.loads(self.full_text), text_damage=6))
        return self._case("tokenizer-full", chooser, path, self.qwen_json)

    def _tokenizer_pipeline(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path = scratch / "tokenizer.json"
        document = fm.mutate_pipeline(chooser, json.loads(self.small_text))
        path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        return self._case("tokenizer-pipeline", chooser, path, self.small_json)

    def _model_copy(self, source: Path, scratch: Path, skip: tuple[str, ...] = ()) -> Path:
        directory = scratch / "model"
        directory.mkdir()
        for item in source.iterdir():
            if item.name not in skip:
                (directory / item.name).symlink_to(item.resolve())
        return directory

    def _configs(self, chooser: fm.Chooser, scratch: Path) -> Case:
        directory = self._model_copy(self.model_dir, scratch)
        files = {"config.json": self.config, "tokenizer_config.json": self.tokenizer_config,
                 "generation_config.json": self.generation_config, "special_tokens_map.json": self.special_tokens_map,
                 "chat_template.json": self.chat_template_json}
        changed = []
        for _ in range(1 + chooser.below(2)):
            name = chooser.pick(list(files))
            if (directory / name).is_symlink():
                (directory / name).unlink()
            document = files[name]
            if name in ("config.json", "tokenizer_config.json") and chooser.chance(1, 6):
                document = dict(document, **chooser.pick(REMOTE_CODE))  # asks for repository code
            (directory / name).write_bytes(fm.mutate_json_file(chooser, document))
            changed.append(name)
        if chooser.chance(1, 12):  # a chat template file instead of (or beside) the JSON fields
            (directory / "chat_template.jinja").write_bytes(
                fm.mutate_text(chooser, self.chat_template_json["chat_template"].encode()))
            changed.append("chat_template.jinja")
        return self._case("configs", chooser, directory, self.model_dir, note=", ".join(changed))

    def _slow_tokenizer(self, chooser: fm.Chooser, scratch: Path) -> Case:
        directory = scratch / "model"
        directory.mkdir()
        which = chooser.below(4)
        vocab = fm.mutate_json_file(chooser, self.slow_vocab) if which == 0 else \
            fm.text_bytes(json.dumps(self.slow_vocab, ensure_ascii=False))
        merges = fm.mutate_text(chooser, self.slow_merges.encode()) if which == 1 else self.slow_merges.encode()
        config = dict(self.slow_tokenizer_config)
        if chooser.chance(1, 4):
            config = dict(config, **chooser.pick(REMOTE_CODE))
        if chooser.chance(1, 4):
            config["tokenizer_class"] = chooser.pick(TOKENIZER_CLASSES)
        tokenizer_config = fm.mutate_json_file(chooser, config) if which >= 2 else fm.text_bytes(json.dumps(config))
        (directory / "vocab.json").write_bytes(vocab)
        (directory / "merges.txt").write_bytes(merges)
        (directory / "tokenizer_config.json").write_bytes(tokenizer_config)
        config_json = self.config if which != 3 else fm.mutate_document(chooser, copy.deepcopy(self.config))
        (directory / "config.json").write_bytes(fm.text_bytes(json.dumps(config_json)))
        return self._case("slow-tokenizer", chooser, directory, self.slow_dir)

    def _safetensors(self, chooser: fm.Chooser, scratch: Path) -> Case:
        directory = self._model_copy(self.model_dir, scratch, skip=("model.safetensors",))
        prefix, size = fm.safetensors_file(chooser, self.draft_header, self.draft_data_bytes)
        with open(directory / "model.safetensors", "wb") as handle:
            handle.write(prefix)
            handle.truncate(size)  # the data section is a sparse run of zeros
        return self._case("safetensors", chooser, directory, self.model_dir)

    def _index(self, chooser: fm.Chooser, scratch: Path) -> Case:
        directory = self._model_copy(self.index_dir, scratch, skip=("model.safetensors.index.json",))
        index = copy.deepcopy(self.index)
        weight_map = index["weight_map"]
        name = "model.safetensors.index.json"
        op = chooser.below(6)
        if op <= 1:
            index = fm.mutate_document(chooser, index)
        elif op == 2:  # a shard name that is hostile
            tensor = chooser.pick(list(weight_map))
            weight_map[tensor] = chooser.pick(HOSTILE_NAMES)
        elif op == 3:  # symlink games: a shard that is a link to somewhere else
            link = directory / "evil.safetensors"
            link.symlink_to(chooser.pick(LINK_TARGETS(directory)))
            weight_map[chooser.pick(list(weight_map))] = link.name
        elif op == 4:  # one real shard replaced by a mutated header, or missing
            shard = chooser.pick(self.shards)
            (directory / shard).unlink()
            if chooser.chance(3, 4):
                header, data_bytes = read_safetensors_header(self.target_dir / shard)
                prefix, size = fm.safetensors_file(chooser, header, data_bytes)
                with open(directory / shard, "wb") as handle:
                    handle.write(prefix)
                    handle.truncate(size)
        else:  # the PyTorch index layout, shards as .bin files
            name = "pytorch_model.bin.index.json"
            for shard in self.shards:
                (directory / shard).unlink()
            (directory / "pytorch_model-00001-of-00001.bin").write_bytes(
                fm.mutate_torch_zip(chooser, self.torch_bytes) if chooser.chance(1, 2) else self.torch_bytes)
            index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "pytorch_model-00001-of-00001.bin",
                                                    "lm_head.weight": "pytorch_model-00001-of-00001.bin"}}
            if chooser.chance(1, 2):
                index = fm.mutate_document(chooser, index)
            else:
                index["weight_map"]["lm_head.weight"] = chooser.pick(HOSTILE_NAMES)
        data = fm.text_bytes(fm.dumps(chooser, index))
        if chooser.chance(1, 6):
            data = fm.mutate_text(chooser, data)
        (directory / name).write_bytes(data)
        return self._case("index", chooser, directory, self.index_dir)

    def _pytorch_bin(self, chooser: fm.Chooser, scratch: Path) -> Case:
        directory = self._model_copy(self.bin_dir, scratch, skip=("pytorch_model.bin",))
        (directory / "pytorch_model.bin").write_bytes(fm.mutate_torch_zip(chooser, self.torch_bytes))
        return self._case("pytorch-bin", chooser, directory, self.bin_dir)

    def _tiktoken_small(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path = scratch / "ranks.tiktoken"
        path.write_bytes(fm.mutate_ranks(chooser, self.tiktoken_small.read_bytes()))
        return self._case("tiktoken-small", chooser, path, self.tiktoken_small)

    def _gguf_small(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path = scratch / "model.gguf"
        path.write_bytes(fm.mutate_gguf(chooser, *self.gguf_small_layout))
        return self._case("gguf-small", chooser, path, self.gguf_small)

    def _state_file(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path, note = fuzz_kept.make_state(chooser, scratch, self.state_documents)
        return Case("state-file", str(path), str(path), swap=False, note=note)

    def _prompt_file(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path, note = fuzz_kept.make_prompts(chooser, scratch, self.prompt_lines)
        return Case("prompt-file", str(path), str(self.model_dir), swap=False, note=note)

    def _gguf_full(self, chooser: fm.Chooser, scratch: Path) -> Case:
        path = scratch / "model.gguf"
        path.write_bytes(fm.mutate_gguf(chooser, *self.gguf_full_layout))
        return self._case("gguf-full", chooser, path, self.gguf_full)


REMOTE_CODE = (
    {"auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}},
    {"auto_map": {"AutoTokenizer": "tokenization_evil.EvilTokenizer"}, "trust_remote_code": True},
    {"auto_map": {"AutoModelForCausalLM": "modeling_evil.EvilModel", "AutoConfig": "configuration_evil.EvilConfig"}},
    {"trust_remote_code": True, "tokenizer_class": "EvilTokenizer"},
)
TOKENIZER_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast", "GPT2Tokenizer", "LlamaTokenizer", "BertTokenizer",
                     "EvilTokenizer", "", "PreTrainedTokenizerFast", "AutoTokenizer", "os.system", "__import__",
                     "TokenizersBackend", 7, None)
HOSTILE_NAMES = ("../../etc/passwd", "/etc/passwd", "..", ".", "", "model-00001-of-00003.safetensors/../../x",
                 "./model-00001-of-00003.safetensors", "sub/../model-00001-of-00003.safetensors",
                 "model.safetensors.index.json", "tokenizer.json", "config.json", "a" * 300, "a/" * 3000 + "x",
                 "\x00", "x\x00y", "C:\\Windows\\win.ini", "\\\\server\\share\\x", "~/x", "model-00001-of-00003",
                 "nonexistent.safetensors", "\udcff.safetensors", "\n", "/dev/zero", "/proc/self/mem")


def LINK_TARGETS(directory: Path) -> tuple[str, ...]:
    return ("/etc/passwd", "/dev/zero", "/dev/null", "/", "/proc/self/mem", "../../etc/hostname",
            str(directory / "nowhere"), str(directory / "evil.safetensors"), str(directory), "tokenizer.json")


# --- the worker side: what runs on one input ------------------------------------------------------------------


def run_case(case: Case) -> None:
    """Open and compare the input the way ``vocabcheck compare`` and ``inspect`` do, and render every report.

    Returns normally on success; raises the project's error for bad input; anything else is a finding. Kept state
    and prompt files run what a run does with them (:mod:`tests.support.fuzz_kept`).
    """
    if case.target in KEPT:
        return KEPT[case.target](case)
    from vocabcheck import compare
    from vocabcheck.render import data, markdown, terminal

    target, draft = (case.reference, case.mutant) if case.swap else (case.mutant, case.reference)
    comparison = compare(target, draft, probe=True)
    console = terminal.console()  # the CLI's console, writing to a buffer
    console.file = io.StringIO()
    document = data.compare_document(comparison)
    json.loads(data.dumps(document))
    markdown.comparison_markdown(comparison)
    terminal.print_comparison(console, comparison)
    mutant = comparison.draft if case.swap else comparison.target
    json.loads(data.dumps(data.inspect_document(mutant)))
    terminal.print_profile(console, mutant)
    _validate(document)


KEPT = {"state-file": fuzz_kept.run_state, "prompt-file": fuzz_kept.run_prompts}
_SCHEMA = None


def _validate(document: dict[str, Any]) -> None:
    global _SCHEMA
    import jsonschema

    from vocabcheck.render.data import schema

    if _SCHEMA is None:
        _SCHEMA = jsonschema.Draft202012Validator(schema("compare-1"))
    _SCHEMA.validate(document)
