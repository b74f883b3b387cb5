"""`compare` encodes the probe corpus of a large tokenizer in a worker process while it reads the profiles: the
worker's encodings are the in-process ones, nothing changes where the worker cannot run, and no worker outlives the
call."""

from __future__ import annotations

import json
import subprocess

import pytest

from vocabcheck import compare, probe
from vocabcheck.errors import InputError
from vocabcheck.probe import corpus_encoding, corpus_in_background, encode_corpus
from vocabcheck.sources import open_model


@pytest.fixture(scope="module")
def no_nfc_json(tmp_path_factory, qwen25_text):
    """The real Qwen2.5 tokenizer without its NFC normalizer: same vocabulary, another split of some texts."""
    document = json.loads(qwen25_text)
    document["normalizer"] = None
    path = tmp_path_factory.mktemp("no-nfc") / "tokenizer.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def started(monkeypatch):
    """The worker processes started during a test."""
    processes: list[subprocess.Popen] = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        process = real(*args, **kwargs)
        processes.append(process)
        return process

    monkeypatch.setattr(subprocess, "Popen", recording)
    return processes


@pytest.mark.parametrize("which", ["qwen2.5", "qwen3.6"])
def test_the_worker_encodes_the_corpus_as_this_process_does(qwen25_json, qwen3_json, which, started):
    path = qwen25_json if which == "qwen2.5" else qwen3_json
    source = open_model(str(path))
    assert len(source.tokenizer_json) >= probe.WORKER_MIN_CHARS  # a file of this size goes to a worker
    with corpus_in_background([source]):
        from_worker = corpus_encoding(source)
        assert "tokenizer" not in source.__dict__, "the worker's result was not used: the tokenizer was built here"
    assert len(started) == 1 and started[0].returncode == 0
    assert from_worker == encode_corpus(open_model(str(path)).tokenizer)
    assert len(from_worker) == len(probe.CORPUS) and all(ids for ids, _ in from_worker[:-1])


def test_compare_finds_the_same_probe_difference_with_and_without_workers(qwen25_json, no_nfc_json, monkeypatch,
                                                                           started):
    with_workers = compare(str(qwen25_json), str(no_nfc_json))
    assert len(started) == 2 and all(p.returncode == 0 for p in started)
    monkeypatch.setattr(probe, "WORKER_MIN_CHARS", float("inf"))
    in_process = compare(str(qwen25_json), str(no_nfc_json))
    assert len(started) == 2
    assert with_workers.diff.probe == in_process.diff.probe
    assert with_workers.diff.probe.differing > 0  # NFC changes how some corpus texts split
    assert [f.message for f in with_workers.findings] == [f.message for f in in_process.findings]


def test_compare_runs_in_process_where_no_worker_can_start(qwen25_json, no_nfc_json, monkeypatch, started):
    expected = compare(str(qwen25_json), str(no_nfc_json)).diff.probe
    monkeypatch.setattr(probe.sys, "executable", "/nonexistent/python")
    assert compare(str(qwen25_json), str(no_nfc_json)).diff.probe == expected
    assert len(started) == 2  # the two of the first call; the second could start none


@pytest.mark.parametrize("pipeline", ["same", "another"])
def test_merges_the_library_refuses_get_the_same_error_and_no_worker_outlives_it(qwen25_json, tmp_path, monkeypatch,
                                                                                  started, pipeline):
    """Where a worker builds the tokenizer, this process leaves the merge check to it, and checks them itself only
    when the worker fails: the error is the one the in-process check gives, whether or not the probe runs (the
    pipelines differ: it does; the files differ in formatting only: it does not)."""
    bad = tmp_path / "tokenizer.json"
    document = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}
    bad.write_text(json.dumps(document), encoding="utf-8")
    other = tmp_path / "other.json"
    other_document = {**document, "normalizer": {"type": "NFC"}} if pipeline == "another" else document
    other.write_text(json.dumps(other_document, indent=1), encoding="utf-8")
    with pytest.raises(InputError) as in_process:
        compare(str(other), str(bad))
    assert started == []  # small files: no worker
    monkeypatch.setattr(probe, "WORKER_MIN_CHARS", 0)
    with pytest.raises(InputError) as with_workers:
        compare(str(other), str(bad))
    assert str(with_workers.value) == str(in_process.value)
    assert "BPE merge 0 ('a' 'b') makes 'ab', which is not in the vocabulary" in str(in_process.value)
    assert len(started) == 2
    assert all(p.returncode is not None for p in started)  # stopped and reaped before compare returned
    assert probe._ACTIVE == {}
