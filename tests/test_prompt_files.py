"""Prompt files (docs/prompts.md): lines end at \\n or \\r\\n only, JSONL only by a .jsonl name or --prompt-format,
plain text otherwise; a JSONL line may carry a string "response"; an unusable line is refused naming its number."""

from __future__ import annotations

import json

import pytest

from vocabcheck.decode.load.loading import Prompt, read_prompt_file
from vocabcheck.errors import BadOption, InputError


def test_a_lone_carriage_return_stays_inside_its_prompt(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_bytes(b"first\rstill first\r\nsecond\nthird\r\r\n")
    assert [p.text for p in read_prompt_file(path)] == ["first\rstill first", "second", "third\r"]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_bytes(b'"a"\r"b"\n')  # a lone \r does not end the first JSON line either
    with pytest.raises(InputError, match="line 1 is not JSON"):
        read_prompt_file(jsonl)


def test_text_whose_lines_look_like_json_is_text(tmp_path):
    """Before: every line starting with '"' or '{' made the whole file JSONL, refused as 'line 1 is not JSON'."""
    path = tmp_path / "quotes.txt"
    path.write_text('"To be, or not to be" is\n{braces} open this line\n', encoding="utf-8")
    assert [p.text for p in read_prompt_file(path)] == ['"To be, or not to be" is', "{braces} open this line"]
    as_json = tmp_path / "strings.txt"
    as_json.write_text('"hello"\n{"prompt": "x"}\n', encoding="utf-8")
    assert [p.text for p in read_prompt_file(as_json)] == ['"hello"', '{"prompt": "x"}']
    assert [p.text for p in read_prompt_file(as_json, "jsonl")] == ["hello", "x"]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text('{"prompt": "x"}\n', encoding="utf-8")
    assert read_prompt_file(jsonl, "text") == [Prompt('{"prompt": "x"}')]


def test_a_json_suffix_needs_an_explicit_format(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text('"hello"\n', encoding="utf-8")
    with pytest.raises(InputError, match="ambiguous: give --prompt-format"):
        read_prompt_file(path)
    assert read_prompt_file(path, "jsonl") == [Prompt("hello")]
    with pytest.raises(BadOption, match="--prompt-format must be one of text, jsonl"):
        read_prompt_file(path, "csv")


def test_jsonl_lines_carry_an_optional_string_response(tmp_path):
    path = tmp_path / "pairs.jsonl"
    messages = [{"role": "user", "content": "Hi"}]
    path.write_text("\n".join(json.dumps(v) for v in [
        {"prompt": "2 + 2 =", "response": " 4"}, {"text": "no answer"}, {"messages": messages, "response": "Hello"},
        "a plain string"]) + "\n", encoding="utf-8")
    assert read_prompt_file(path) == [Prompt("2 + 2 =", response=" 4"), Prompt("no answer"),
                                      Prompt(None, tuple(messages), "Hello"), Prompt("a plain string")]
    assert read_prompt_file(tmp_path / "pairs.jsonl", "text")[0].response is None


@pytest.mark.parametrize("lines, words", [
    (['{"prompt": "ok"}', '{"prompt": "x", "response": 4}'], "line 2: 'response' must be a string, not 4"),
    (['{"prompt": "ok"}', "", '{"prompt": "x", "response": ["a"]}'], "line 3: 'response' must be a string"),
    (['{"response": "only"}'], "line 1 needs a string, or an object with 'prompt', 'text' or 'messages'"),
    (["[1, 2]"], "line 1 needs a string"),
    (['{"prompt": "ok"}', "not json"], "line 2 is not JSON"),
])
def test_an_unusable_jsonl_line_is_refused_by_its_number(tmp_path, lines, words):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_prompt_file(path)
    assert words in caught.value.problem and caught.value.where == str(path)


def test_the_command_line_takes_the_prompt_format(cli, qwen_pair, tmp_path):
    target = qwen_pair[0]
    path = tmp_path / "prompts.txt"
    path.write_text('{"prompt": "Hello"}\n', encoding="utf-8")
    runs = {}
    for fmt in ([], ["--prompt-format", "jsonl"]):
        code, out, err = cli("run", target, "--method", "none", "--prompt-file", path, *fmt, "--max-new-tokens", 2,
                             "--json")
        assert code == 0, err
        runs[bool(fmt)] = [s["prompt"] for s in json.loads(out)["sequences"]]
    assert runs == {False: ['{"prompt": "Hello"}'], True: ["Hello"]}
    code, _, err = cli("run", target, "--method", "none", "--prompt-file", path, "--prompt-format", "yaml")
    assert code == 2 and err.strip() == "error: --prompt-format must be one of text, jsonl, not 'yaml'", err
    code, _, err = cli("bench", target, "--methods", "none", "--prompts", path, "--prompt-format", "yaml")
    assert code == 2 and err.strip() == "error: --prompt-format must be one of text, jsonl, not 'yaml'", err


def test_a_prompt_that_encodes_to_no_tokens_is_refused_naming_its_file_and_line(cli, qwen_pair, tmp_path):
    # found by the prompt-file fuzz target: an empty JSON string ended in an error that named no file
    target, _ = qwen_pair
    path = tmp_path / "prompts.jsonl"
    path.write_text('"def f():"\n""\n', encoding="utf-8")
    code, out, err = cli("run", target, "--method", "none", "--prompt-file", path, "--max-new-tokens", 2)
    assert code == 2, err
    assert out == ""
    assert err.strip().splitlines() == [f"error: {path}: line 2: the prompt encodes to no tokens; give it some text"]
