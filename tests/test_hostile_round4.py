"""Hostile input, round 4: kept state files, prompt files, and options with no bound (docs/hostile-input.md).

Each test is one class of attack: bounded time and memory, exit 0 or one line with exit 2, nothing outside the cache
touched, and stdout of ``--json`` one JSON document.
"""

from __future__ import annotations

import json
import os

import pytest

from vocabcheck.decode.cpu import measured
from vocabcheck.decode.cpu.head import KernelFile, stored_choices

NEW = 32  # tokens: enough steps for -k auto to measure and keep its costs


def one_line(code, out, err, expected=2):
    lines = err.strip().splitlines()
    assert code == expected and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert out == "" or expected != 2
    return lines[0]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache directory of this test's own (kept state is per cache)."""
    root = tmp_path / "cache"
    root.mkdir()
    monkeypatch.setenv("VOCABCHECK_CACHE", str(root))
    return root


def run_auto(cli, target):
    """A run whose -k auto reads and writes step-costs.json."""
    code, out, err = cli("run", target, "--method", "ngram", "-k", "auto", "--prompt", "def f(x): return f(x)",
                         "--max-new-tokens", NEW, "--device", "cpu", "--json")
    assert code == 0, err
    document = json.loads(out)  # one JSON document, nothing else on stdout
    assert len(document["sequences"][0]["token_ids"]) == NEW
    return document


def aside(cache, name):
    return sorted(p.name for p in cache.iterdir() if p.name.startswith(f"{name}.unusable-"))


# --- kept state files ---------------------------------------------------------------------------------------------


def test_a_fifo_state_file_is_set_aside_without_blocking(cli, cache, qwen_pair):
    os.mkfifo(cache / "step-costs.json")  # a reader that opened it without O_NONBLOCK would wait for a writer forever
    run_auto(cli, qwen_pair[0])
    assert aside(cache, "step-costs.json")
    assert (cache / "step-costs.json").is_file()  # rebuilt as a regular file


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/stdout"])
def test_a_state_file_linked_to_a_device_is_neither_read_nor_written_through(cli, cache, qwen_pair, device):
    (cache / "step-costs.json").symlink_to(device)
    run_auto(cli, qwen_pair[0])  # /dev/zero read to the end: out of memory; /dev/stdout written: not JSON
    path = cache / "step-costs.json"
    assert not path.is_symlink() and path.is_file()
    assert json.loads(path.read_text())["version"] == 1


@pytest.mark.parametrize("content", [
    "[" * 100_000 + "]" * 100_000,  # nested past Python's recursion
    json.dumps({"version": 1, "machines": "x" * 10}),  # the wrong shape
    "{not json",
], ids=["deep", "wrong-shape", "not-json"])
def test_an_unparseable_state_file_is_set_aside_and_rebuilt(cli, cache, qwen_pair, content):
    (cache / "step-costs.json").write_text(content)
    run_auto(cli, qwen_pair[0])
    assert aside(cache, "step-costs.json")
    assert json.loads((cache / "step-costs.json").read_text())["version"] == 1


def test_a_state_file_over_the_cap_is_not_read(cache, monkeypatch):
    monkeypatch.setattr(measured.MachineStore, "max_bytes", 64)
    store = measured.MachineStore("head-kernels.json")
    (cache / "head-kernels.json").write_text(json.dumps({"version": 1, "machines": {store.machine(): {"a": "b" * 100}}}))
    assert store.get("a") is None
    assert aside(cache, "head-kernels.json")


@pytest.mark.parametrize("bucket", ["²", "1" * 5000, "-3", " 4"])
def test_kernel_choices_keep_only_buckets_that_are_numbers(cache, bucket):
    key = ((1, 2), __import__("torch").float32)
    from vocabcheck.decode.cpu.head import head_name

    KernelFile.put(head_name(key), {bucket: "mkl", "8": "onednn"})
    assert stored_choices(key) == {8: "onednn"}


@pytest.mark.parametrize("value", [1e308, 1e30, 0.0, 1e-30])
def test_kept_step_costs_no_machine_could_have_measured_are_measured_again(cli, cache, qwen_pair, value):
    """Costs and units of 1e308 once made every later run fail (ZeroDivisionError in the fit's solve); zero, huge
    and tiny units are discarded (run's JSON says so); the run is lossless (its tokens equal plain decoding's) and
    rewrites the file."""
    target = qwen_pair[0]
    plain = cli("run", target, "--method", "none", "--prompt", "def f(x): return f(x)", "--max-new-tokens", NEW,
                "--device", "cpu", "--json")
    clean = run_auto(cli, target)
    assert clean["metrics"]["kept_state"] == "none"  # a fresh cache: nothing kept yet
    state = json.loads((cache / "step-costs.json").read_text())
    for entries in state["machines"].values():
        for entry in entries.values():
            for fit in entry["fits"].values():
                fit["unit"] = value
                fit["xt"] = [value] * len(fit["xt"])
                fit["xx"] = [[value] * len(row) for row in fit["xx"]]
    (cache / "step-costs.json").write_text(json.dumps(state))
    poisoned = run_auto(cli, target)
    assert poisoned["metrics"]["kept_state"] in ("discarded", "replaced")  # run says it did not trust them
    expected = json.loads(plain[1])["sequences"][0]["token_ids"]
    assert poisoned["sequences"][0]["token_ids"] == clean["sequences"][0]["token_ids"] == expected
    for entries in json.loads((cache / "step-costs.json").read_text())["machines"].values():
        for entry in entries.values():
            for fit in entry["fits"].values():
                assert 1e-6 <= fit["unit"] <= 600


def test_run_says_when_it_started_from_kept_step_costs(cli, cache, qwen_pair):
    """The second run of a pair on a machine starts from what the first kept, and says so in both views ("used",
    or "replaced" where a busy machine made its first step three times dearer or cheaper than the kept fit priced
    it: either way it read the kept entry, which a fresh or discarded one would not say)."""
    target = qwen_pair[0]
    assert run_auto(cli, target)["metrics"]["kept_state"] == "none"
    assert run_auto(cli, target)["metrics"]["kept_state"] in ("used", "replaced")
    code, out, err = cli("run", target, "--method", "ngram", "-k", "auto", "--prompt", "def f(x): return f(x)",
                         "--max-new-tokens", NEW, "--device", "cpu")
    assert code == 0, err
    said = " ".join(out.split())
    assert "kept step costs" in said
    assert "used: started from what an earlier run kept" in said or "replaced: what was kept disagreed" in said


# --- prompt files -------------------------------------------------------------------------------------------------


def run_file(cli, target, path, *extra):
    return cli("run", target, "--method", "none", "--prompt-file", path, "--max-new-tokens", 2, "--device", "cpu",
               *extra)


def test_a_fifo_or_device_prompt_file_is_one_line(cli, tmp_path, qwen_pair):
    fifo = tmp_path / "prompts.txt"
    os.mkfifo(fifo)
    assert one_line(*run_file(cli, qwen_pair[0], fifo)) == f"error: {fifo}: prompt file is a FIFO, not a regular file"
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")
    line = one_line(*run_file(cli, qwen_pair[0], zero))
    assert line == "error: /dev/zero: prompt file is a character device, not a regular file"


def test_prompt_files_have_a_size_a_count_and_a_length_cap(cli, tmp_path, qwen_pair, monkeypatch):
    path = tmp_path / "prompts.txt"
    path.write_text("one\ntwo\nthree\n")
    monkeypatch.setenv("VOCABCHECK_MAX_PROMPT_FILE_BYTES", "8")
    line = one_line(*run_file(cli, qwen_pair[0], path))
    assert line.startswith(f"error: {path}: prompt file is 14 bytes, over the 8 this reader takes;")
    assert "VOCABCHECK_MAX_PROMPT_FILE_BYTES" in line
    monkeypatch.delenv("VOCABCHECK_MAX_PROMPT_FILE_BYTES")
    monkeypatch.setenv("VOCABCHECK_MAX_PROMPTS", "2")
    assert "holds more than 2 prompts; VOCABCHECK_MAX_PROMPTS" in one_line(*run_file(cli, qwen_pair[0], path))
    monkeypatch.delenv("VOCABCHECK_MAX_PROMPTS")
    monkeypatch.setenv("VOCABCHECK_MAX_PROMPT_CHARS", "4")
    assert "line 3 holds 5 characters in one prompt, more than 4" in one_line(*run_file(cli, qwen_pair[0], path))


@pytest.mark.parametrize(("line", "says"), [
    pytest.param("[" * 100_000 + "]" * 100_000, "line 1 nests deeper than 32 levels", id="deep"),
    ('{"prompt": "\\udc80"}', "line 1 holds a lone surrogate ('\\udc80'), which is not text"),
    ('{"prompt": "a", "response": "' + "x" * 50 + '"}', "line 1 holds 50 characters in one prompt"),
])
def test_jsonl_prompt_lines_are_bounded_and_text(cli, tmp_path, qwen_pair, monkeypatch, line, says):
    monkeypatch.setenv("VOCABCHECK_MAX_PROMPT_CHARS", "40")
    path = tmp_path / "prompts.jsonl"
    path.write_text(line + "\n")
    assert says in one_line(*run_file(cli, qwen_pair[0], path))


# --- options with no bound ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "{t}", "--prompt", "x", "--max-new-tokens", "1000000000"], "--max-new-tokens must be at most 1,048,576"),
    (["run", "{t}", "--prompt", "x", "--max-new-tokens", "5000", "--method", "none"],
     "--max-new-tokens 5,000 does not fit the target's context of 4,096 tokens"),
    (["bench", "{t}", "--warmup", str(10**9)], "--warmup must be at most 100"),
    (["bench", "{t}", "--batch-sizes", "1000000"], "--batch-sizes must be at most 4,096"),
    (["predict", "{t}", "--batch-size", str(10**6)], "--batch-size must be at most 4,096"),
    (["run", "{t}", "--prompt", "x", "--seed", str(2**70)], "--seed must be at most"),
    (["predict", "{t}", "--prompt", "x", "--top-p", "nan"], "--top-p must be in (0, 1]"),
    (["predict", "{t}", "--prompt", "x", "--top-k", "-5"], "--top-k must be 0 (off) or more, not -5"),
])
def test_every_count_is_checked_before_a_model_loads(cli, qwen_pair, argv, says):
    code, out, err = cli(*[qwen_pair[0] if a == "{t}" else a for a in argv])
    assert says in one_line(code, out, err)


def test_predict_on_a_padded_pair_warns_of_nothing_it_was_not_asked(cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("predict", target, draft, "--prompt", "def f(x):", "-k", "2", "--max-new-tokens", 4,
                         "--no-ngram", "--device", "cpu", "--json")
    assert code == 0, err
    assert "Warning" not in err and "warning:" not in err and "--translate" not in err
    assert json.loads(out)["drafts"][0]["translated"] is False


# --- chat templates -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("template", "says"), [
    pytest.param("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x",
                 "the chat template did not finish rendering in 3 s; VOCABCHECK_TEMPLATE_TIMEOUT_S", id="loops"),
    pytest.param("{{ 'x' * 10**9 }}", "the chat template fails: ", id="a-billion-characters"),
    pytest.param("{% set s = 'y' * 1000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}",
                 "the chat template fails: ", id="a-megabyte-a-thousand-times"),
])
def test_a_chat_template_is_rendered_bounded_in_time_and_memory(cli, tmp_path, qwen_pair, monkeypatch, template,
                                                                 says):
    import shutil

    target = tmp_path / "target"
    shutil.copytree(qwen_pair[0], target)
    config = json.loads((target / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = template
    (target / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    monkeypatch.setenv("VOCABCHECK_TEMPLATE_TIMEOUT_S", "3")
    monkeypatch.setenv("VOCABCHECK_TEMPLATE_MEMORY_BYTES", str(1 << 30))
    code, out, err = cli("run", target, "--method", "none", "--prompt", "Hi", "--chat", "--max-new-tokens", 2,
                         "--device", "cpu")
    line = one_line(code, out, err)
    assert line.startswith(f"error: {target}") and says in line, line
