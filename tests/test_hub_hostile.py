"""A hub that means harm or is broken (issue #16, rows 5-8), against the test hub server on 127.0.0.1: a model
description that is not one, answers dripped a byte at a time, a file far larger than its listing says, safetensors
headers that lie. Each is one line naming the URL or file and the problem, exit code 2, and nothing half-written
in the cache. Also: the safetensors header parser local files and hub headers share, and the download hook."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from tests.support.hub_server import FLOOD_BYTES, FLOOD_LISTED, FakeHub, run_cli, use_hub

from vocabcheck.cli import main
from vocabcheck.errors import InputError
from vocabcheck.sources import open_model
from vocabcheck.sources.checkpoint import parse_safetensors_header, safetensors_shapes
from vocabcheck.sources.hub import HEADER_PROBE_BYTES
from vocabcheck.sources.progress import report_downloads

GOOD = "acme/good-draft"


@pytest.fixture(scope="module")
def server(qwen_pair):
    hub = FakeHub().start()
    hub.add_repo(GOOD, qwen_pair[1])
    yield hub
    hub.stop()


@pytest.fixture
def hub(server, monkeypatch, tmp_path):
    server.reset_counts()
    use_hub(monkeypatch, server.url, tmp_path / "hf-home")
    monkeypatch.delenv("VOCABCHECK_HUB_TIMEOUT", raising=False)
    yield server


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, out: str, err: str) -> str:
    """The single error line of a failed command (exit code 2, nothing on stdout, no traceback)."""
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def left_in_cache(home: Path, hub: FakeHub, repo_id: str, name: str) -> list[Path]:
    """What a refused download of ``name`` left behind: the file in a snapshot, its blob, partial downloads."""
    storage = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    blob = hub.repos[repo_id].files[name]
    found = list(storage.glob(f"snapshots/*/{name}"))
    found += [path for path in storage.glob("blobs/*") if path.name in (blob.git_sha, blob.sha256)]
    return found + list(home.rglob("*.incomplete"))


def draft_files(qwen_pair) -> dict[str, Path]:
    draft = qwen_pair[1]
    return {name: draft / name for name in ("tokenizer.json", "tokenizer_config.json", "config.json")}


# --- row 5: a model description that is not one --------------------------------------------------------------------


def _document(hub: FakeHub, repo_id: str, siblings) -> bytes:
    return json.dumps({**hub.model_info(repo_id), "siblings": siblings}).encode()


@pytest.mark.parametrize(("case", "body", "problem"), [
    ("html", lambda hub, repo: b"<html><body>502 Bad Gateway</body></html>",
     "the hub's model description is not valid JSON (Expecting value at line 1, column 1)"),
    ("binary", lambda hub, repo: b"\x89PNG\r\n\x1a\n\xff\xfe\x00",
     "the hub's model description is not UTF-8 text"),
    ("list", lambda hub, repo: json.dumps([hub.model_info(repo)]).encode(),
     "the hub's model description must be a JSON object, found a list"),
    ("siblings-string", lambda hub, repo: _document(hub, repo, "tokenizer.json"),
     "the hub's model description gives 'siblings' as a string 'tokenizer.json', not a list of files"),
    ("sibling-number", lambda hub, repo: _document(hub, repo, [42]),
     "the hub's model description gives siblings[0] as a number 42, not an object"),
    ("rfilename-number", lambda hub, repo: _document(hub, repo, [{"rfilename": 7, "size": 10}]),
     "the hub's model description gives siblings[0].rfilename as a number 7, not a file name"),
    ("size-string", lambda hub, repo: _document(hub, repo, [{"rfilename": "tokenizer.json", "size": "1 KB"}]),
     "the hub's model description gives siblings[0].size as a string '1 KB', not a byte count"),
    ("lfs-size-negative", lambda hub, repo: _document(hub, repo, [
        {"rfilename": "tokenizer.json", "size": 10}, {"rfilename": "model.safetensors", "lfs": {"size": -1}}]),
     "the hub's model description gives siblings[1].lfs.size as a number -1, not a byte count"),
])
def test_a_model_description_that_is_not_one_is_one_line_naming_the_url(hub, capsys, qwen_pair, case, body,
                                                                          problem):
    repo = f"hostile/info-{case}"
    hub.add_repo(repo, qwen_pair[1])
    hub.answer_model_info(repo, body(hub, repo))
    line = one_line(*run(capsys, "inspect", repo, "--json"))
    assert line == f"error: {hub.url}/api/models/{repo}/revision/main: {problem}"


# --- row 6: a hub that drips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["abc", "0", "-5", "inf", "nan"])
def test_an_invalid_hub_timeout_is_one_line_and_nothing_is_asked(hub, capsys, monkeypatch, setting):
    monkeypatch.setenv("VOCABCHECK_HUB_TIMEOUT", setting)
    line = one_line(*run(capsys, "inspect", GOOD, "--json"))
    assert line == f"error: VOCABCHECK_HUB_TIMEOUT: not a number of seconds above 0: {setting!r}"
    assert hub.requests == []


@pytest.mark.parametrize(("file", "kind"), [
    (None, "drip"),  # the model description, its body a byte at a time
    (None, "drip-head"),  # the model description, its status line and headers a byte at a time
    ("tokenizer.json", "drip"),  # a whole-file download
    ("model.safetensors", "drip"),  # a header range request (from the CDN)
])
def test_a_hub_that_drips_is_cut_off_at_the_deadline(server, qwen_pair, tmp_path, file, kind):
    """The server drips until the client disconnects; the command gives up after VOCABCHECK_HUB_TIMEOUT seconds.
    Only the outcome is asserted: whichever request runs out of time, it is one line that says so."""
    repo = f"drip/{kind}-{file or 'info'}".replace(".", "-")
    server.add_repo(repo, qwen_pair[1])
    server.fault(repo, file, kind)
    home = tmp_path / "hf-home"
    done = run_cli(server, home, ["inspect", repo, "--json"], extra_env={"VOCABCHECK_HUB_TIMEOUT": "2"},
                   timeout=300)
    line = one_line(done.exit_code, done.stdout, done.stderr)
    assert line.startswith(f"error: {repo}: ")
    assert "did not answer in full within 2 s (VOCABCHECK_HUB_TIMEOUT)" in line
    if file is not None:
        assert left_in_cache(home, server, repo, file) == []


# --- row 7: a file much larger than its listing ----------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "problem"), [
    ("flood", f"tokenizer.json: the hub sent more than the {FLOOD_LISTED:,} bytes its file list gives; "
              "download stopped, nothing kept"),
    ("flood-announced", f"tokenizer.json: the hub announced {FLOOD_BYTES:,} bytes, more than the {FLOOD_LISTED:,} "
                        "its file list gives; nothing downloaded"),
])
def test_a_file_larger_than_its_listing_is_stopped_and_nothing_is_kept(hub, capsys, qwen_pair, tmp_path, kind,
                                                                       problem):
    repo = f"hostile/{kind}"
    hub.add_repo(repo, qwen_pair[1])
    hub.fault(repo, "tokenizer.json", kind)
    line = one_line(*run(capsys, "inspect", repo, "--json"))
    assert line == f"error: {repo}: {problem}"
    # the client stopped reading long before the 300 MB were sent (what was sent is what socket buffers took)
    assert hub.bytes_served(repo).get("tokenizer.json", 0) < FLOOD_BYTES // 2
    assert left_in_cache(tmp_path / "hf-home", hub, repo, "tokenizer.json") == []


# --- row 8: safetensors headers that lie, read by range request ------------------------------------------------------


def safetensors_bytes(header: dict, data: int) -> bytes:
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + bytes(data)


@pytest.mark.parametrize(("case", "header", "problem"), [
    ("evil-dtype", {"model.embed_tokens.weight": {"dtype": "EVIL", "shape": [2**70, 2**70], "data_offsets": [0, 16]}},
     "safetensors header gives tensor 'model.embed_tokens.weight' the unknown dtype 'EVIL'"),
    ("huge-shape", {"model.embed_tokens.weight": {"dtype": "F16", "shape": [2**70, 2**70], "data_offsets": [0, 16]}},
     "safetensors header gives tensor 'model.embed_tokens.weight' the shape [1180591620717411303424, "
     "1180591620717411303424] of F16, which does not fit its 16 bytes"),
    ("overlap", {"model.embed_tokens.weight": {"dtype": "F16", "shape": [4, 2], "data_offsets": [0, 16]},
                 "lm_head.weight": {"dtype": "F16", "shape": [4, 2], "data_offsets": [8, 24]}},
     "safetensors header places tensors 'model.embed_tokens.weight' and 'lm_head.weight' on the same bytes"),
    ("past-the-end", {"model.embed_tokens.weight": {"dtype": "F16", "shape": [2**20, 2],
                                                    "data_offsets": [0, 2**22]}},
     "safetensors header places tensor 'model.embed_tokens.weight' at bytes [0, 4194304], outside the file's 24 data "
     "bytes"),
])
def test_a_lying_safetensors_header_on_the_hub_is_refused(hub, capsys, qwen_pair, tmp_path, case, header, problem):
    repo = f"hostile/header-{case}"
    commit = hub.add_repo(repo, {**draft_files(qwen_pair), "model.safetensors": safetensors_bytes(header, 24)})
    line = one_line(*run(capsys, "inspect", repo, "--json"))
    assert line == f"error: hf://{repo}@{commit}/model.safetensors: {problem}"
    ranges = [r.range for r in hub.requests if r.path.split("?")[0].endswith("/model.safetensors")]
    assert set(ranges) <= {f"bytes=0-{HEADER_PROBE_BYTES - 1}"}  # read by range request, never downloaded
    assert left_in_cache(tmp_path / "hf-home", hub, repo, "model.safetensors") == []


# --- the one safetensors header parser -----------------------------------------------------------------------------


def test_the_header_parser_agrees_with_the_safetensors_library_on_a_real_file(tmp_path):
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file({"embed": np.zeros((7, 3), dtype=np.float16), "norm": np.ones(3, dtype=np.float32),
               "empty": np.zeros((0, 4), dtype=np.int64), "flag": np.zeros(2, dtype=bool)}, str(path),
              metadata={"format": "np"})
    ours = {name: (shape.dtype, shape.shape) for name, shape in safetensors_shapes(path).items()}
    with safe_open(str(path), framework="numpy") as handle:
        theirs = {name: (handle.get_slice(name).get_dtype(), tuple(handle.get_slice(name).get_shape()))
                  for name in handle.keys()}
    assert ours == theirs


@pytest.mark.parametrize(("header", "problem"), [
    ({"t": {"dtype": "EVIL", "shape": [2], "data_offsets": [0, 8]}}, "the unknown dtype 'EVIL'"),
    ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, "at bytes [8, 0], outside"),
    ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]}}, "at bytes [0, 8.0], outside"),
    ({"t": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, "an invalid shape [2.0]"),
    ({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, "an invalid shape [-2]"),
    ({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, "which does not fit its 8 bytes"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, "tensors 'a' and 'b' on the same bytes"),
    ({"__metadata__": {"format": 5}, "t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
     "'__metadata__' must map names to strings"),
    ({"__metadata__": ["pt"], "t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
     "'__metadata__' must map names to strings"),
])
def test_the_header_parser_refuses_what_the_safetensors_library_refuses(tmp_path, header, problem):
    """Headers the safetensors library refuses when it has the whole file; the shared parser refuses them from the
    header and the file size alone, and local files go through it too."""
    import safetensors

    data = safetensors_bytes(header, 8)
    with pytest.raises(safetensors.SafetensorError):
        safetensors.deserialize(data)
    body = data[8:-8]
    with pytest.raises(InputError, match="safetensors header") as refused:
        parse_safetensors_header(body, len(data), "model.safetensors", "https://hub.example/model.safetensors")
    assert problem in refused.value.problem and refused.value.where == "https://hub.example/model.safetensors"
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    with pytest.raises(InputError) as local:
        safetensors_shapes(path)
    assert local.value.problem == refused.value.problem and local.value.where == str(path)


# --- progress: reported through a hook, drawn by no one here -------------------------------------------------------


def test_downloads_are_reported_to_the_registered_hook(hub, capsys):
    events = []
    with report_downloads(events.append):
        open_model(GOOD, read_checkpoint=False)
    labels = {event.label for event in events}
    assert f"{GOOD} tokenizer.json" in labels and f"{GOOD} config.json" in labels
    size = hub.repos[GOOD].files["tokenizer.json"].size
    finished = [e for e in events if e.label == f"{GOOD} tokenizer.json" and e.done]
    assert len(finished) == 1 and finished[0].completed == finished[0].total == size
    assert capsys.readouterr() == ("", "")  # the sources layer draws nothing itself
