"""Hostile model repositories: nothing they contain is executed, no header makes vocabcheck allocate what it claims,
no file name leads outside the model directory, no file is read past its size cap, and every refusal is one line
naming the file (exit code 2)."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from tests.support.cpu import cpu_budget
from vocabcheck.errors import VocabcheckError
from vocabcheck.sources import base, checkpoint


def one_line_error(cli, argv, path, *words, code=2):
    result, _, err = cli(*argv)
    assert result == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def copy_model(source: Path, directory: Path, skip: tuple[str, ...] = ()) -> Path:
    directory.mkdir()
    for item in source.iterdir():
        if item.name not in skip:
            shutil.copyfile(item, directory / item.name)
    return directory


# --- pickles that would run code ---------------------------------------------------------------------------------


class _Evil:
    """Unpickling this calls open(marker, "w"): the marker file appears if anything unpickles it as a whole object."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def evil_checkpoint(marker: Path) -> bytes:
    """A torch.save-format zip archive whose data.pkl creates ``marker`` when unpickled without weights_only."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"lm_head.weight": _Evil(marker)}, protocol=2))
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


@pytest.fixture
def bin_model(materials, tmp_path) -> Path:
    """A real tiny Qwen2 model saved as pytorch_model.bin (config, weights, the small tokenizer)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    directory = tmp_path / "bin-model"
    directory.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(materials.model_dir / name, directory / name)
    config = Qwen2Config(vocab_size=544, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, architectures=["Qwen2ForCausalLM"])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    config.save_pretrained(directory)
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    return directory


@pytest.mark.parametrize(("layout", "command"), [("one file", "inspect"), ("sharded", "compare")])
def test_a_bin_checkpoint_with_a_code_pickle_is_refused_and_never_run(cli, materials, tmp_path, layout, command):
    """A torch.save-format checkpoint whose data.pkl would create a file if unpickled: refused, one line naming the
    file, and the file never appears (weights_only unpickling); alone or as one shard of an index."""
    marker = tmp_path / "pwned"
    directory = copy_model(materials.model_dir, tmp_path / "evil", skip=("model.safetensors",))
    if layout == "one file":
        evil = directory / "pytorch_model.bin"
    else:
        evil = directory / "pytorch_model-00002-of-00002.bin"
        (directory / "pytorch_model-00001-of-00002.bin").write_bytes(materials.torch_bytes)
        (directory / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {
            "model.embed_tokens.weight": "pytorch_model-00001-of-00002.bin",
            "lm_head.weight": "pytorch_model-00002-of-00002.bin"}}))
    evil.write_bytes(evil_checkpoint(marker))
    argv = [command, directory] + ([materials.model_dir] if command == "compare" else [])
    one_line_error(cli, argv, evil.name, "refused")
    assert not marker.exists()


def test_a_legacy_pickle_checkpoint_is_refused_without_unpickling(cli, materials, tmp_path):
    marker = tmp_path / "pwned"
    directory = copy_model(materials.model_dir, tmp_path / "legacy", skip=("model.safetensors",))
    (directory / "pytorch_model.bin").write_bytes(pickle.dumps({"lm_head.weight": _Evil(marker)}, protocol=2))
    one_line_error(cli, ["inspect", directory], directory / "pytorch_model.bin", "cannot read PyTorch checkpoint")
    assert not marker.exists()


def test_run_never_unpickles_a_code_pickle(cli, bin_model, tmp_path):
    """`run` profiles the model first: the code pickle is refused before any model is loaded."""
    marker = tmp_path / "pwned"
    (bin_model / "pytorch_model.bin").write_bytes(evil_checkpoint(marker))
    one_line_error(cli, ["run", bin_model, "--method", "none", "--prompt", "hello", "--max-new-tokens", 2,
                            "--device", "cpu"], bin_model / "pytorch_model.bin", "refused")
    assert not marker.exists()


def test_load_model_loads_bin_weights_only(bin_model, tmp_path):
    """transformers 5 loads .bin checkpoints with torch.load(weights_only=True) by default, and `load_model` does not
    turn it off: a checkpoint swapped for a code pickle after the profile was read (or a profile built elsewhere) is
    still refused, and its code never runs."""
    import pickle as pickle_module

    import torch

    from vocabcheck import inspect
    from vocabcheck.decode.load.loading import load_model

    profile = inspect(str(bin_model))
    model = load_model(profile, torch.device("cpu"), torch.float32)  # the clean checkpoint loads: the path is real
    assert model.get_input_embeddings().weight.shape == (544, 8)
    marker = tmp_path / "pwned"
    (bin_model / "pytorch_model.bin").write_bytes(evil_checkpoint(marker))
    with pytest.raises((pickle_module.UnpicklingError, VocabcheckError)):
        load_model(profile, torch.device("cpu"), torch.float32)
    assert not marker.exists()


def test_a_pickle_that_makes_torch_error_reporting_hang_is_refused_at_once(cli, materials, tmp_path):
    # found by the fuzzer: torch.load formats the refusal of a pickle through regular expressions whose time grows
    # with the square of the longest non-blank run in the message; a 600 KB global name took hours
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02ctorch\n" + b"F" * 600_000 + b"\n.")
        archive.writestr("archive/version", "3\n")
    directory = copy_model(materials.model_dir, tmp_path / "slow-pickle", skip=("model.safetensors",))
    (directory / "pytorch_model.bin").write_bytes(buffer.getvalue())
    with cpu_budget(10):
        one_line_error(cli, ["inspect", directory], directory / "pytorch_model.bin", "refused",
                       "holds a string of 600,006 characters")


# --- repository code ---------------------------------------------------------------------------------------------

EVIL_MODULE = "open({marker!r}, 'w').write('ran')\nclass EvilTokenizer: pass\nclass EvilConfig: pass\n" \
              "class EvilModel: pass\n"
TOKENIZER_AUTO_MAP = {"auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}
CONFIG_AUTO_MAP = {"auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                                "AutoModelForCausalLM": "modeling_evil.EvilModel",
                                "AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}


def remote_code_repo(source: Path, directory: Path, marker: Path, *, tokenizer_config: dict | None = None,
                     config: dict | None = None) -> Path:
    """``source`` with Python modules that create ``marker`` when imported, and JSON that asks for them."""
    copy_model(source, directory)
    for module in ("tokenization_evil", "configuration_evil", "modeling_evil"):
        (directory / f"{module}.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    for name, extra in (("tokenizer_config.json", tokenizer_config), ("config.json", config)):
        if extra:
            document = json.loads((directory / name).read_text()) if (directory / name).is_file() else {}
            (directory / name).write_text(json.dumps({**document, **extra}))
    return directory


@pytest.mark.parametrize(("where", "extra"), [
    ("tokenizer_config.json", TOKENIZER_AUTO_MAP),
    ("tokenizer_config.json", {**TOKENIZER_AUTO_MAP, "trust_remote_code": True}),
    ("config.json", {**CONFIG_AUTO_MAP, "trust_remote_code": True}),
    ("config.json", {**CONFIG_AUTO_MAP, "model_type": "evil"}),
])
def test_custom_tokenizer_code_without_tokenizer_json_is_unsupported(cli, materials, tmp_path, where, extra):
    """Only vocab.json + merges.txt and an auto_map that names the repository's own tokenizer class: reported as
    unsupported, the repository's module is never imported."""
    marker = tmp_path / "ran"
    directory = remote_code_repo(materials.slow_dir, tmp_path / "repo", marker,
                                 tokenizer_config=extra if where == "tokenizer_config.json" else None,
                                 config=extra if where == "config.json" else None)
    one_line_error(cli, ["compare", directory, materials.slow_dir], directory, "custom code",
                   f"{where} auto_map", "never runs repository code")
    assert not marker.exists()


TRUST_AND_CLASS = {"trust_remote_code": True, "tokenizer_class": "EvilTokenizer"}


@pytest.mark.parametrize(("source", "tokenizer_config", "config"), [
    ("slow_dir", TRUST_AND_CLASS, TRUST_AND_CLASS),
    ("slow_dir", {"trust_remote_code": True}, {"trust_remote_code": True}),
    ("model_dir", {**TOKENIZER_AUTO_MAP, "trust_remote_code": True}, {**CONFIG_AUTO_MAP, "trust_remote_code": True}),
], ids=["slow-files-class", "slow-files", "tokenizer-json-auto-map"])
def test_trust_remote_code_in_a_repository_file_is_ignored(cli, materials, tmp_path, source, tokenizer_config,
                                                           config):
    """A file cannot switch trust_remote_code on: transformers converts slow tokenizer files with its own classes, and
    with a tokenizer.json the tokenizer is data, whatever auto_map says; the repository's modules are never
    imported."""
    marker = tmp_path / "ran"
    original = getattr(materials, source)
    directory = remote_code_repo(original, tmp_path / "repo", marker, tokenizer_config=tokenizer_config,
                                 config=config)
    code, out, err = cli("compare", directory, original, "--json")
    assert code == 0, err
    assert json.loads(out)["verdict"] == "identical"
    assert not marker.exists()


def test_a_model_whose_architecture_is_repository_code_is_refused_by_run(cli, bin_model, tmp_path):
    marker = tmp_path / "ran"
    for module in ("configuration_evil", "modeling_evil"):
        (bin_model / f"{module}.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    config = json.loads((bin_model / "config.json").read_text())
    config.update({**CONFIG_AUTO_MAP, "model_type": "evil", "trust_remote_code": True})
    (bin_model / "config.json").write_text(json.dumps(config))
    one_line_error(cli, ["run", bin_model, "--method", "none", "--prompt", "hello", "--max-new-tokens", 2,
                            "--device", "cpu"], bin_model, "custom code")
    assert not marker.exists()


# --- headers that lie -------------------------------------------------------------------------------------------


def test_a_safetensors_header_claiming_2_to_the_60_bytes_is_refused_before_reading(cli, materials, tmp_path):
    directory = copy_model(materials.model_dir, tmp_path / "huge")
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 2**60) + b"{}" + bytes(64))
    tracemalloc.start()
    try:
        one_line_error(cli, ["inspect", directory], directory / "model.safetensors",
                       "header claims 1,152,921,504,606,846,976 bytes but the file has 74")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_a_safetensors_header_over_the_cap_is_refused_before_reading(cli, materials, tmp_path):
    """A header that the file does hold, but over 100 MB: refused from its 8-byte length (a sparse file here)."""
    directory = copy_model(materials.model_dir, tmp_path / "long-header", skip=("model.safetensors",))
    claimed = checkpoint.MAX_SAFETENSORS_HEADER_BYTES + 1
    with open(directory / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", claimed))
        handle.truncate(8 + claimed)
    tracemalloc.start()
    try:
        one_line_error(cli, ["inspect", directory], directory / "model.safetensors",
                       f"header of {claimed:,} bytes is over the 104,857,600-byte limit")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_a_shard_of_a_sharded_checkpoint_that_lies_is_named(cli, materials, tmp_path):
    directory = tmp_path / "sharded"
    shutil.copytree(materials.index_dir, directory, symlinks=True)
    shard = sorted(p for p in directory.glob("*.safetensors"))[1]
    shard.unlink()
    shard.write_bytes(struct.pack("<Q", 2**60) + b"{}")
    one_line_error(cli, ["inspect", directory], shard, "header claims 1,152,921,504,606,846,976 bytes")


# --- index files that point elsewhere ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "shards/../../../etc/passwd", "..", "",
                                  "model-00001\x00.safetensors"])
@pytest.mark.parametrize("index", ["model.safetensors.index.json", "pytorch_model.bin.index.json"])
def test_an_index_naming_a_file_outside_the_directory_is_refused(cli, materials, tmp_path, name, index):
    directory = copy_model(materials.model_dir, tmp_path / "escape", skip=("model.safetensors",))
    (directory / index).write_text(json.dumps({"weight_map": {"lm_head.weight": name}}))
    words = ["invalid file"] if name in ("", "model-00001\x00.safetensors") else ["points outside the model directory"]
    one_line_error(cli, ["inspect", directory], directory / index, *words)


def test_an_index_naming_a_non_string_is_refused(cli, materials, tmp_path):
    directory = copy_model(materials.model_dir, tmp_path / "types", skip=("model.safetensors",))
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": ["a.safetensors"]}}))
    one_line_error(cli, ["inspect", directory], index, "must map tensor names to file names")


@pytest.mark.parametrize(("link", "words"), [
    ("/dev/zero", ["is missing"]),  # not a regular file: never read, so never an endless read
    ("/etc/passwd", ["header claims"]),  # a regular file elsewhere: 8 bytes read, refused, nothing of it shown
    ("loop", ["is missing"]),  # a link to itself
    ("nowhere", ["is missing"]),  # a dangling link
])
def test_a_shard_that_is_a_symlink_elsewhere_is_read_no_further_than_its_header(cli, materials, tmp_path, link,
                                                                                words):
    directory = copy_model(materials.model_dir, tmp_path / "links", skip=("model.safetensors",))
    shard = directory / "evil.safetensors"
    shard.symlink_to(shard if link == "loop" else (directory / "nowhere" if link == "nowhere" else Path(link)))
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": "evil.safetensors"}}))
    with cpu_budget(10):
        line = one_line_error(cli, ["inspect", directory], "evil.safetensors", *words)
    assert "root:" not in line  # no content of the file it points to


def test_a_shard_behind_a_symlinked_directory_is_read_no_further_than_its_header(cli, materials, tmp_path):
    directory = copy_model(materials.model_dir, tmp_path / "dirlink", skip=("model.safetensors",))
    (directory / "up").symlink_to("/")
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": "up/etc/passwd"}}))
    line = one_line_error(cli, ["inspect", directory], "passwd", "header claims")
    assert "root:" not in line


def test_fifos_where_files_are_expected_never_block(cli, materials, tmp_path):
    """A FIFO named tokenizer.json, config.json or model.safetensors is not a regular file: it is never opened
    (opening a FIFO blocks until a writer comes)."""
    directory = copy_model(materials.model_dir, tmp_path / "fifos", skip=("config.json", "model.safetensors"))
    os.mkfifo(directory / "config.json")
    os.mkfifo(directory / "model.safetensors")
    code, out, err = cli("inspect", directory, "--json")
    assert code == 0, err
    assert json.loads(out)["embeddings"]["source"] == "unknown"
    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    one_line_error(cli, ["inspect", fifo], fifo, "not a regular file")


@pytest.mark.parametrize("name", ["merges.txt", "vocab.json", "tokenizer_config.json", "config.json"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "dangling"])
def test_slow_tokenizer_files_that_are_not_regular_files_are_refused(cli, materials, tmp_path, name, kind):
    """Converting vocab.json + merges.txt hands the directory to transformers, which would open a FIFO (and block) or
    read /dev/zero (without end): such a file is refused by name first."""
    directory = copy_model(materials.slow_dir, tmp_path / "slow", skip=(name,))
    if kind == "fifo":
        os.mkfifo(directory / name)
    else:
        (directory / name).symlink_to(kind if kind.startswith("/") else directory / "nowhere")
    with cpu_budget(30):
        one_line_error(cli, ["inspect", directory], directory / name, "is not a regular file")


# --- size caps ---------------------------------------------------------------------------------------------------


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize(("name", "limit"), [
    ("tokenizer.json", base.MAX_TOKENIZER_JSON_BYTES),
    ("config.json", base.MAX_CONFIG_JSON_BYTES),
    ("tokenizer_config.json", base.MAX_CONFIG_JSON_BYTES),
    ("generation_config.json", base.MAX_CONFIG_JSON_BYTES),
    ("special_tokens_map.json", base.MAX_CONFIG_JSON_BYTES),
    ("chat_template.jinja", base.MAX_CHAT_TEMPLATE_BYTES),
    ("model.safetensors.index.json", base.MAX_INDEX_JSON_BYTES),
])
def test_json_files_over_their_cap_are_refused_without_being_read(cli, materials, tmp_path, name, limit):
    directory = copy_model(materials.model_dir, tmp_path / "big", skip=(name, "model.safetensors"))
    path = sparse(directory / name, limit + 1)
    tracemalloc.start()
    try:
        one_line_error(cli, ["inspect", directory], path, f"{limit + 1:,} bytes, over the {limit:,}-byte limit")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # the file was never read into memory


def test_the_size_caps_have_their_documented_values():
    assert base.MAX_TOKENIZER_JSON_BYTES == 256 * 2**20
    assert base.MAX_CONFIG_JSON_BYTES == base.MAX_INDEX_JSON_BYTES == 32 * 2**20
    assert base.MAX_CHAT_TEMPLATE_BYTES == 4 * 2**20
    assert checkpoint.MAX_SAFETENSORS_HEADER_BYTES == 100 * 2**20
    assert base.MAX_TOKENIZER_ENTRIES == 3_000_000  # entries counted before a tokenizer.json is parsed


# --- deep nesting ------------------------------------------------------------------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("name", ["tokenizer.json", "config.json", "tokenizer_config.json",
                                  "generation_config.json", "model.safetensors.index.json"])
def test_json_nested_100000_deep_is_one_line(cli, materials, tmp_path, name):
    # json.loads raises RecursionError: one line, exit code 2
    directory = copy_model(materials.model_dir, tmp_path / "deep", skip=(name,))
    (directory / name).write_text('{"a": ' + nested(100_000) + "}")
    one_line_error(cli, ["inspect", directory], directory / name, "nested too deeply")


@pytest.mark.parametrize("field", ["dropout", "unk_token", "byte_fallback"])
def test_tokenizer_values_nested_to_the_parser_limit_are_one_line(cli, materials, tmp_path, field):
    """Values nested as deep as the parser accepts (and a little deeper): never an uncaught RecursionError."""
    for depth in range(930, 1000, 7):
        document = json.loads(materials.small_text)
        path = tmp_path / f"deep-{depth}.json"
        path.write_text(json.dumps({**document, "model": {**document["model"], field: 0}})
                        .replace(f'"{field}": 0', f'"{field}": ' + nested(depth), 1))
        line = one_line_error(cli, ["compare", path, materials.small_json], path)
        assert "nested too deeply to read" in line or "recursion limit exceeded" in line, line


def test_a_normalizer_nested_past_the_tokenizers_limit_is_one_line(cli, materials, tmp_path):
    document = json.loads(materials.small_text)
    document["normalizer"] = {"type": "Sequence", "normalizers": [0]}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document).replace('"normalizers": [0]', '"normalizers": [' + nested(900) + "]"))
    one_line_error(cli, ["inspect", path], path, "normalizer", "recursion limit")
