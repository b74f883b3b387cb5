"""config.json values are read with their types, in one place (vocabcheck.config): every command says the same about
a config, a value of the wrong type is one line naming config.json and the field (exit code 2), never ignored and
never a crash in transformers later; the types accepted are the ones transformers accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vocabcheck.config import ModelConfig, read_config
from vocabcheck.errors import InputError


def edited_model(source: Path, directory: Path, *, config: dict | None = None, drop: tuple[str, ...] = (),
                 generation: dict | None = None, skip: tuple[str, ...] = ()) -> Path:
    """A copy of ``source`` (weights linked, not copied) whose config.json has ``config`` merged in and ``drop``
    removed; ``generation`` is merged into generation_config.json."""
    directory.mkdir()
    for item in source.iterdir():
        if item.name not in skip + ("config.json", "generation_config.json"):
            (directory / item.name).symlink_to(item.resolve())
    document = json.loads((source / "config.json").read_text())
    document.update(config or {})
    for key in drop:
        document.pop(key, None)
    (directory / "config.json").write_text(json.dumps(document))
    generation_config = json.loads((source / "generation_config.json").read_text())
    generation_config.update(generation or {})
    (directory / "generation_config.json").write_text(json.dumps(generation_config))
    return directory


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


WRONG_TYPES = [
    ("vocab_size", "151936", "vocab_size must be an integer, found the string '151936'"),
    ("vocab_size", 151936.0, "vocab_size must be an integer, found the number 151936.0"),
    ("tie_word_embeddings", "false", "tie_word_embeddings must be true or false, found the string 'false'"),
    ("eos_token_id", [151645, "151643"], "eos_token_id must be an integer or a list of integers, found a list whose "
                                         "item 1 is the string '151643'"),
    ("hidden_size", True, "hidden_size must be an integer, found true"),
]


@pytest.mark.parametrize(("field", "value", "problem"), WRONG_TYPES, ids=[f"{f}={v!r}" for f, v, _ in WRONG_TYPES])
def test_a_config_value_of_the_wrong_type_is_the_same_one_line_in_every_command(cli, qwen_pair, tmp_path, field,
                                                                                 value, problem):
    target, draft = qwen_pair
    bad = edited_model(draft, tmp_path / "bad", config={field: value})
    out_dir = tmp_path / "aligned"
    commands = {
        "inspect": ["inspect", bad],
        "compare": ["compare", target, bad],
        "compare --no-probe": ["compare", bad, draft, "--no-probe", "--json"],
        "run": ["run", bad, "--method", "none", "--prompt", "hello", "--max-new-tokens", 1, "--device", "cpu"],
        "align": ["align", target, bad, "--out", out_dir],
    }
    lines = {}
    for name, argv in commands.items():
        code, out, err = cli(*argv)
        assert code == 2, (name, code, out, err)
        lines[name] = one_line(err)
    expected = f"error: {bad / 'config.json'}: {problem}"
    assert set(lines.values()) == {expected}, lines
    assert not out_dir.exists()  # align wrote nothing


def test_a_generation_config_eos_of_the_wrong_type_is_one_line(cli, qwen_pair, tmp_path):
    """generation_config.json's eos ids decide when generation stops: a string is refused, not skipped in favour of
    config.json's."""
    _, draft = qwen_pair
    bad = edited_model(draft, tmp_path / "bad", generation={"eos_token_id": "151645"})
    code, _, err = cli("inspect", bad)
    assert code == 2
    assert one_line(err) == (f"error: {bad / 'generation_config.json'}: eos_token_id must be an integer or a list of "
                             "integers, found the string '151645'")


@pytest.mark.parametrize(("config", "words"), [
    ({"num_hidden_layers": "2"}, ["num_hidden_layers"]),  # a field only transformers reads: its strict validation
    ({"layer_types": ["bogus_attention", "full_attention"]}, ["validate_layer_type"]),  # its class validation
])
def test_run_refuses_in_one_line_what_only_transformers_checks(cli, qwen_pair, tmp_path, config, words):
    """A config the profile accepts but transformers refuses when `run` loads the model: one line naming the model
    directory (exit code 2), not a traceback (exit code 3)."""
    _, draft = qwen_pair
    bad = edited_model(draft, tmp_path / "bad", config=config)
    code, out, err = cli("run", bad, "--method", "none", "--prompt", "hello", "--max-new-tokens", 1,
                         "--device", "cpu")
    assert code == 2, (out, err)
    line = one_line(err)
    assert str(bad) in line and "transformers cannot load this model" in line, line
    for word in words:
        assert word in line, line


def test_null_means_not_given_and_text_config_fills_in(cli, qwen_pair, tmp_path):
    """Multimodal configs keep the text model's fields in text_config: a top-level field that is missing or null is
    read from there (without a checkpoint, the rows come from it)."""
    _, draft = qwen_pair
    model = edited_model(draft, tmp_path / "multimodal", skip=("model.safetensors",),
                         config={"vocab_size": None, "tie_word_embeddings": None,
                                 "text_config": {"vocab_size": 151936, "tie_word_embeddings": True,
                                                 "hidden_size": 32}},
                         drop=("hidden_size",))
    code, out, err = cli("inspect", model, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["config_vocab_size"] == 151936
    assert document["embeddings"] == {"input_rows": 151936, "output_rows": 151936, "input_tensor": None,
                                      "output_tensor": None, "tied": True, "hidden_size": 32, "source": "config"}


def test_a_wrong_type_inside_text_config_is_named_with_its_path(cli, qwen_pair, tmp_path):
    _, draft = qwen_pair
    bad = edited_model(draft, tmp_path / "bad", config={"text_config": {"vocab_size": "151936"}})
    code, _, err = cli("compare", bad, draft)
    assert code == 2
    assert one_line(err).endswith("config.json: text_config.vocab_size must be an integer, found the string "
                                  "'151936'")


def test_a_negative_token_id_means_no_token(cli, qwen_pair, tmp_path):
    """Old Llama configs write pad_token_id -1; transformers loads them (with a warning), and so does vocabcheck."""
    _, draft = qwen_pair
    model = edited_model(draft, tmp_path / "llama-style", config={"pad_token_id": -1, "bos_token_id": None})
    code, _, err = cli("compare", model, draft, "--no-probe")
    assert code == 0, err
    from vocabcheck import inspect

    config = inspect(str(model)).config
    assert config.pad_token_id == -1 and config.token_id("pad") is None and config.token_id("bos") is None


def test_a_negative_vocab_size_is_refused(cli, qwen_pair, tmp_path):
    """transformers reads a negative vocab_size but cannot build the model with it; vocabcheck says so up front."""
    _, draft = qwen_pair
    bad = edited_model(draft, tmp_path / "bad", config={"vocab_size": -151936})
    code, _, err = cli("inspect", bad)
    assert code == 2
    assert one_line(err).endswith("config.json: vocab_size must be a non-negative integer, found the integer -151936")


# --- the same types as transformers -----------------------------------------------------------------------------

# (field, value): every value here is one that a Qwen2 config declares a type for, so transformers' strict dataclass
# validation decides; vocabcheck must decide the same. null and negative sizes are the documented exceptions (tested
# above): null is "not given" whatever the model class requires, and a negative size is refused up front.
AGAINST_TRANSFORMERS = [
    ("vocab_size", 151936), ("vocab_size", "151936"), ("vocab_size", 151936.0), ("vocab_size", 151936.5),
    ("vocab_size", True), ("vocab_size", [151936]), ("vocab_size", {"value": 151936}),
    ("hidden_size", 32), ("hidden_size", "32"), ("hidden_size", 32.0),
    ("tie_word_embeddings", True), ("tie_word_embeddings", False), ("tie_word_embeddings", "false"),
    ("tie_word_embeddings", 0), ("tie_word_embeddings", 1), ("tie_word_embeddings", "true"),
    ("bos_token_id", 151643), ("bos_token_id", -1), ("bos_token_id", None), ("bos_token_id", 151643.0),
    ("bos_token_id", "151643"), ("bos_token_id", False),
    ("eos_token_id", 151645), ("eos_token_id", [151645, 151643]), ("eos_token_id", []), ("eos_token_id", None),
    ("eos_token_id", "151645"), ("eos_token_id", [151645, "151643"]), ("eos_token_id", 151645.0),
    ("eos_token_id", [151645.0]), ("eos_token_id", True),
    ("pad_token_id", None), ("pad_token_id", 0), ("pad_token_id", "0"), ("pad_token_id", [0]),
    ("sliding_window", 4096), ("sliding_window", None), ("sliding_window", "4096"), ("sliding_window", 4096.0),
    ("layer_types", ["full_attention", "full_attention"]), ("layer_types", None), ("layer_types", "full_attention"),
    ("layer_types", ["full_attention", 1]),
]


def test_the_types_accepted_are_the_ones_transformers_accepts(qwen_pair, tmp_path):
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    from transformers import AutoConfig

    _, draft = qwen_pair
    base = json.loads((draft / "config.json").read_text())
    disagreements = []
    for number, (field, value) in enumerate(AGAINST_TRANSFORMERS):
        config = dict(base, **{field: value})
        directory = tmp_path / f"config-{number}"
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
        try:
            AutoConfig.from_pretrained(directory, local_files_only=True)
            transformers_accepts = True
        except StrictDataclassFieldValidationError:
            transformers_accepts = False
        try:
            read_config(config, str(directory / "config.json"))
            vocabcheck_accepts = True
        except InputError:
            vocabcheck_accepts = False
        if transformers_accepts != vocabcheck_accepts:
            disagreements.append((field, value, transformers_accepts, vocabcheck_accepts))
    assert not disagreements, disagreements
    assert sum(1 for f, v in AGAINST_TRANSFORMERS if _accepted(f, v)) >= 15  # both sides of the line are tested


def _accepted(field, value) -> bool:
    try:
        read_config({field: value}, "config.json")
    except InputError:
        return False
    return True


def test_the_typed_view_is_what_the_profile_reports(qwen_pair):
    from vocabcheck import inspect

    target, draft = qwen_pair
    for model, rows, tied in ((target, 152064, False), (draft, 151936, True)):
        profile = inspect(str(model))
        assert profile.config == ModelConfig(
            vocab_size=rows, hidden_size=32, tie_word_embeddings=tied, bos_token_id=151643, eos_token_id=151645,
            pad_token_id=151643, unk_token_id=None, sliding_window=None,
            layer_types=("full_attention", "full_attention"), model_type="qwen2", architectures=("Qwen2ForCausalLM",))
        assert profile.config_vocab_size == rows and profile.architecture == "Qwen2ForCausalLM"
