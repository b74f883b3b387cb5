"""Fuzzing the loaders: every mutated input ends in success or vocabcheck's own one-line error, in bounded time and
memory; and one regression test for each crash the fuzzer found.

The short run here draws structure-aware mutations of the real fixtures with hypothesis (tests/fuzz_mutate.py,
tests/fuzz_targets.py) and runs each input in a worker process (tests/fuzz_worker.py) that measures its time and
memory and can be killed when it hangs. The long run is ``python benchmarks/fuzz.py`` (reports/fuzz.md).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import fuzz_mutate as fm
from tests.support.cpu import cpu_budget
from tests.support.fuzz_targets import TARGETS
from tests.support.fuzz_worker import Worker
from vocabcheck.cli import main

# inputs per target in the short run (1,296 in all, about 45 s on two cores)
SHORT_RUN = {
    "tokenizer-small": 300,
    "configs": 200,
    "safetensors": 150,
    "index": 150,
    "slow-tokenizer": 50,
    "tiktoken-small": 80,
    "pytorch-bin": 80,
    "gguf-small": 80,
    "tokenizer-full": 6,
    "tokenizer-pipeline": 60,
    "state-file": 80,
    "prompt-file": 60,
}


@pytest.fixture(scope="session")
def worker(tmp_path_factory):
    handle = Worker(tmp_path_factory.mktemp("fuzz-worker") / "worker.log")
    yield handle
    handle.close()


def _explain(case, outcome) -> str:
    return (f"{outcome.kind} on {case.target} input {case.mutant} (reference {case.reference}, swap={case.swap}, "
            f"{case.note}): {outcome.error}: {outcome.message}\n{outcome.traceback}")


@pytest.mark.parametrize("target", list(SHORT_RUN))
def test_mutated_inputs_end_in_success_or_one_line_error(target, materials, worker, tmp_path):
    """Property: success, or a VocabcheckError (exit code 2, naming the file, one line); within the target's time
    bound; peak memory within its bound. Anything else (another exception, a Rust panic, a hang, a worker that dies)
    fails with the input kept in tmp_path."""
    _, limit, memory = TARGETS[target]
    counter = iter(range(10**9))
    outcomes = []

    @settings(max_examples=SHORT_RUN[target], deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        scratch = tmp_path / f"input-{next(counter)}"
        scratch.mkdir()
        case = materials.make(target, fm.HypothesisChooser(data), scratch)
        outcome = worker.run(case, limit, memory)
        outcomes.append(outcome.kind)
        assert outcome.kind in ("ok", "error"), _explain(case, outcome)

    check()
    assert len(outcomes) >= SHORT_RUN[target]
    # the mutations must reach past the first check, not only break the file
    assert "ok" in outcomes or target in ("tokenizer-full",), outcomes


# --- regressions: one per crash the fuzzer found ---------------------------------------------------------------


def assert_one_line_error(code, err, path, *words):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def small_model(materials, tmp_path) -> Path:
    """A copy of the small Qwen2.5-derived model directory (small tokenizer, real configs, small safetensors)."""
    return Path(shutil.copytree(materials.model_dir, tmp_path / "model"))


def small_document(materials) -> dict:
    return json.loads(materials.small_text)


def test_a_number_of_5000_digits_in_tokenizer_json_is_bad_input(cli, materials, tmp_path):
    # json.loads raised ValueError (Python's 4,300-digit limit), not JSONDecodeError: exit code 3
    path = tmp_path / "tokenizer.json"
    path.write_text(materials.small_text.replace('"version": "1.0"', '"version": ' + "1" * 5000, 1))
    assert_one_line_error(*cli("inspect", path)[::2], path, "not valid JSON", "4,300 digits")


def test_a_number_of_5000_digits_in_config_json_is_bad_input(cli, small_model):
    config = small_model / "config.json"
    config.write_text(config.read_text().replace('"hidden_size": 32', '"hidden_size": ' + "9" * 5000))
    assert_one_line_error(*cli("inspect", small_model)[::2], config, "config.json is not valid JSON")


def test_a_model_type_that_is_not_a_string_is_bad_input(cli, materials, tmp_path):
    # `model_type not in MODEL_DEFAULTS` raised TypeError: unhashable type: 'dict'
    document = small_document(materials)
    document["model"]["type"] = {"BPE": 1}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document))
    assert_one_line_error(*cli("inspect", path)[::2], path, "unsupported tokenizer model type")


def test_a_unigram_score_no_float_holds_is_bad_input(cli, tmp_path):
    # float(10**400) raised OverflowError
    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", 1' + "0" * 400
                    + ']]}}')
    assert_one_line_error(*cli("inspect", path)[::2], path, "Unigram scores")


@pytest.mark.parametrize("where", ["vocab", "added_tokens", "config"])
def test_an_unpaired_surrogate_is_refused_where_it_is_read(cli, materials, small_model, where):
    # Python's JSON parser accepts "\udc80"; the profile held it, and printing or writing the report failed with
    # UnicodeEncodeError (exit code 3)
    tokenizer = small_model / "tokenizer.json"
    if where == "config":
        config = small_model / "config.json"
        config.write_text(config.read_text().replace('"Qwen2ForCausalLM"', '"Qwen2\\udc80"'))
        path = config
    else:
        document = small_document(materials)
        if where == "vocab":
            document["model"]["vocab"]["\udc80"] = document["model"]["vocab"].pop("a")
        else:
            document["added_tokens"][0]["content"] = "<|end\udc80|>"
        tokenizer.write_text(json.dumps(document))  # ensure_ascii: the surrogate is written as an escape
        path = tokenizer
    assert_one_line_error(*cli("compare", small_model, materials.model_dir, "--json")[::2], path,
                          "not Unicode text", "U+DC80")


def test_escaped_surrogate_pairs_are_text(cli, materials, small_model):
    """An emoji written as a surrogate-pair escape (json.dumps' default) is a real character: accepted, same
    fingerprint as the file written in UTF-8."""
    document = small_document(materials)
    document["added_tokens"].append({"id": 600, "content": "😀", "special": False, "normalized": False,
                                     "lstrip": False, "rstrip": False, "single_word": False})
    tokenizer = small_model / "tokenizer.json"
    tokenizer.write_text(json.dumps(document, ensure_ascii=True))
    assert '\\ud83d\\ude00' in tokenizer.read_text()
    other = small_model.parent / "utf8.json"
    other.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    code, out, err = cli("compare", tokenizer, other, "--json")
    assert code == 0, err
    assert json.loads(out)["verdict"] == "identical"


def test_a_safetensors_header_nested_too_deeply_is_bad_input(cli, small_model):
    # huggingface_hub's header parser let RecursionError through
    header = b"[" * 100_000 + b"]" * 100_000
    (small_model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert_one_line_error(*cli("inspect", small_model)[::2], small_model / "model.safetensors",
                          "nested too deeply")


def test_a_safetensors_shape_of_huge_dimensions_is_refused_at_once(cli, small_model):
    # huggingface_hub multiplied out every shape (parameter_count): 200,000 dimensions of 2**64 took minutes
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [2**64] * 200_000,
                                                       "data_offsets": [0, 8]}}).encode()
    (small_model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with cpu_budget(10):
        assert_one_line_error(*cli("inspect", small_model)[::2], small_model / "model.safetensors",
                              "does not fit its 8 bytes")


def test_a_safetensors_header_cannot_claim_rows_its_file_does_not_hold(cli, small_model):
    """A header that says 2**40 rows over 8 bytes would make `align` pad billions of rows: refused."""
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [2**40, 32],
                                                       "data_offsets": [0, 8]}}).encode()
    (small_model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    assert_one_line_error(*cli("inspect", small_model)[::2], small_model / "model.safetensors",
                          "[1099511627776, 32] of F32", "does not fit")


def test_a_lone_lm_head_beside_a_tied_config_reads_its_rows(cli, small_model, materials):
    # a config saying tied beside a checkpoint with only lm_head: rows were None and the diff crashed formatting them
    header = json.dumps({"lm_head.weight": {"dtype": "F32", "shape": [544, 32], "data_offsets": [0, 544 * 32 * 4]}})
    (small_model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode()
                                                    + bytes(544 * 32 * 4))
    config = json.loads((small_model / "config.json").read_text())
    config["vocab_size"] = 600
    (small_model / "config.json").write_text(json.dumps(config))
    code, out, err = cli("compare", materials.model_dir, small_model, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["alignment"]["draft_rows"] == 544
    assert "rows.config-mismatch" in {f["code"] for f in document["findings"]}


def test_an_index_naming_a_shard_too_long_for_the_file_system_is_bad_input(cli, small_model):
    # Path.is_file() raised OSError (ENAMETOOLONG) out of the loader
    (small_model / "model.safetensors").unlink()
    index = small_model / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": "a" * 300 + ".safetensors"}}))
    assert_one_line_error(*cli("inspect", small_model)[::2], index, "cannot be opened", "too long")


def test_a_damaged_pytorch_pickle_is_bad_input(cli, materials, small_model):
    # torch's weights-only unpickler raised IndexError on a truncated BINPUT opcode
    import io
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(materials.torch_bytes))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info in source.infolist():
            payload = source.read(info)
            if info.filename.endswith("data.pkl"):
                payload = payload[:payload.index(b"q\x00") + 1]  # BINPUT without its argument
            archive.writestr(info.filename, payload)
    (small_model / "model.safetensors").unlink()
    (small_model / "pytorch_model.bin").write_bytes(buffer.getvalue())
    assert_one_line_error(*cli("inspect", small_model)[::2], small_model / "pytorch_model.bin",
                          "cannot read PyTorch checkpoint")


@pytest.fixture
def slow_model(materials, tmp_path) -> Path:
    return Path(shutil.copytree(materials.slow_dir, tmp_path / "slow"))


def test_a_config_transformers_rejects_is_bad_input_for_conversion(cli, slow_model):
    # transformers' strict config dataclass raised StrictDataclassFieldValidationError out of AutoTokenizer
    config = json.loads((slow_model / "config.json").read_text())
    config["rope_parameters"] = "bos_token_id"
    (slow_model / "config.json").write_text(json.dumps(config))
    assert_one_line_error(*cli("inspect", slow_model)[::2], slow_model,
                          "transformers cannot build a tokenizer here", "rope_parameters")


def test_slow_tokenizer_files_the_tokenizers_library_rejects_are_bad_input(cli, slow_model):
    # the tokenizers library raised its bare Exception ("Error while initializing BPE") out of AutoTokenizer
    (slow_model / "vocab.json").write_text("")
    assert_one_line_error(*cli("inspect", slow_model)[::2], slow_model,
                          "transformers cannot build a tokenizer here", "BPE")


def test_slow_tokenizer_files_that_make_the_library_panic_are_bad_input(capfd, slow_model):
    # vocab.json giving a token a string for an id: the tokenizers library panics while it builds the BPE model
    # (PanicException derives from BaseException, so `except Exception` missed it) and Rust printed its panic report
    # and backtrace on the terminal
    vocab = json.loads((slow_model / "vocab.json").read_text())
    vocab["ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ"] = "<|x|>"
    (slow_model / "vocab.json").write_text(json.dumps(vocab))
    code = main(["inspect", str(slow_model)])
    out, err = capfd.readouterr()  # file descriptor 2 itself, where Rust writes its panic report
    assert code == 2, err
    assert err.strip().splitlines() == [err.strip()], err
    assert err.startswith(f"error: {slow_model}: transformers cannot build a tokenizer here: PanicException: "), err


def test_a_sparse_vocab_json_is_refused_before_the_library_writes_every_id(cli, slow_model):
    # tokenizers' to_str() walks every id up to the largest: an id of 4,294,967,295 asked for 8 GiB and aborted
    vocab = json.loads((slow_model / "vocab.json").read_text())
    vocab["zzzz"] = 2**32 - 1
    (slow_model / "vocab.json").write_text(json.dumps(vocab))
    with cpu_budget(20):
        assert_one_line_error(*cli("inspect", slow_model)[::2], slow_model, "sparse beyond reason")


@pytest.fixture(params=["in-process", "worker"])
def probe_path(request, monkeypatch):
    """The probe's tokenizer built in this process, or (as `compare` does for large files) in a worker process first:
    a file the worker cannot load or encode must end in the same one-line error."""
    from vocabcheck import probe

    if request.param == "worker":
        monkeypatch.setattr(probe, "WORKER_MIN_CHARS", 0)
    return request.param


def test_a_tokenizer_json_the_library_panics_on_is_bad_input(cli, materials, tmp_path, probe_path):
    # BPE with a continuing_subword_prefix longer than a merge's second part: tokenizers panics in from_str; the
    # probe of `compare` loads the tokenizer and the panic escaped as PanicException (exit code 1, a traceback)
    document = small_document(materials)
    document["model"]["continuing_subword_prefix"] = "###"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document))
    assert_one_line_error(*cli("compare", path, materials.small_json)[::2], path,
                          "the tokenizers library cannot load this tokenizer")


def test_a_tokenizer_that_loads_but_cannot_encode_is_bad_input(cli, materials, tmp_path, probe_path):
    # an unk token missing from the vocabulary: loading succeeded and the probe's encode_batch raised
    document = small_document(materials)
    document["model"]["unk_token"] = "hidden_size"
    document["model"]["vocab"] = {t: i for t, i in document["model"]["vocab"].items() if t != "é" and t != "Ã"}
    document["model"]["merges"] = []
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document))
    assert_one_line_error(*cli("compare", path, materials.small_json)[::2], path,
                          "cannot encode text with it", "hidden_size")


def test_a_pre_tokenizer_regex_that_backtracks_forever_is_bad_input(cli, materials, tmp_path, probe_path):
    """A catastrophic regex: the regex engine stops at its retry limit and tokenizers panics; refused as bad input
    within seconds."""
    document = small_document(materials)
    document["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "(a|aa)+$"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document))
    with cpu_budget(30):
        assert_one_line_error(*cli("compare", path, materials.small_json)[::2], path,
                              "cannot encode text with it", "retry-limit")


def test_a_gguf_whose_merges_name_unknown_tokens_is_bad_input(cli, materials, tmp_path):
    # transformers' GGUF builder raised the tokenizers library's bare Exception ("Token `Ġof` out of vocabulary")
    import gguf
    import numpy as np
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = list(bytes_to_unicode().values())
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(alphabet)
    writer.add_token_types([1] * len(alphabet))
    writer.add_token_merges(["Ġ of"])
    writer.add_tensor("token_embd.weight", np.zeros((len(alphabet), 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_one_line_error(*cli("inspect", path)[::2], path, "transformers cannot build this GGUF tokenizer")


@pytest.mark.parametrize(("line", "words"), [
    (b"YQ== -1", "is not an id"),
    (b"YQ== 4294967296", "is not an id"),
    (b"YQ== 4000000000", "sparse beyond reason"),
    (b"YQ== 3", "also given on line"),
    (b"YWFh" * 400 + b" 600", "over the 1,024-byte limit"),
])
def test_tiktoken_ranks_that_lie_are_bad_input(cli, materials, tmp_path, line, words):
    # a negative or 2**32 rank made the BPE constructor raise OverflowError; a rank of 4e9 made to_str() walk
    # 4 billion ids; a duplicate rank gave two tokens one id; a 1,200-byte token costs its length squared
    lines = materials.tiktoken_small.read_bytes().splitlines()
    path = tmp_path / "ranks.tiktoken"
    path.write_bytes(b"\n".join(lines[:300] + [line]) + b"\n")
    assert_one_line_error(*cli("inspect", path)[::2], path, words)


def test_a_finding_that_quotes_text_with_brackets_prints(cli, materials, tmp_path):
    # found by the fuzzer after render/terminal.py began printing findings in a table grid: the message went in as
    # a markup string, and the probe's text "... [INST] [/INST] ..." quoted in probe.encodings raised rich's
    # MarkupError ("closing tag '[/INST]' ... doesn't match any open tag"): exit code 3 on a valid pair
    document = small_document(materials)
    for token in document["added_tokens"]:
        if token["content"] == "<|im_start|>":
            token["content"] = "<|im_begin|>"
    draft = tmp_path / "renamed.json"
    draft.write_text(json.dumps(document))
    code, out, err = cli("compare", materials.small_json, draft)
    assert code == 1, err  # an added token renamed: incompatible, and the report says why
    assert "[INST] [/INST]" in out and "probe.encodings" in out
