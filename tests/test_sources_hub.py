"""Hub ids (``org/name[@revision]``) against a hub-compatible server on 127.0.0.1: verdicts, the bytes each command
transfers, the Hugging Face cache and offline mode, and one clear line for every failure."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import sys
from pathlib import Path

import pytest

from tests.support.hub_server import FakeHub, run_cli, use_hub
from vocabcheck.errors import RemoteError, SourceNotFound, UnsupportedModel
from vocabcheck.render.progress import TerminalProgress, show_progress
from vocabcheck.sources import hub as hub_source
from vocabcheck.sources import open_model
from vocabcheck.sources.checkpoint import find_checkpoint

TARGET = "Qwen/Qwen2.5-7B-Instruct"
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
SLOW = "mistralai/Mistral-7B-v0.1"  # tokenizer.model only, pickled weights only
PRIVATE = "acme/private-draft"
GATED = "meta-llama/Gated-7B"
MISTRAL_FORMAT = "mistralai/Magistral-Small-2506"  # Mistral's own format only: tekken.json, consolidated.safetensors
TOKEN = "hf_fake_token_for_tests"
HEADER_PROBE = hub_source.HEADER_PROBE_BYTES


@pytest.fixture(scope="module")
def server(qwen_pair, mistral_json, tmp_path_factory):
    """One server for the module; each test gets a fresh cache and cleared counters and faults."""
    import numpy as np
    from tests.support.fixtures import MISTRAL_SPM, mistral_data
    from safetensors.numpy import save_file

    consolidated = tmp_path_factory.mktemp("mistral-format") / "consolidated.safetensors"
    save_file({"tok_embeddings.weight": np.zeros((131072, 8), dtype=np.float16),
               "output.weight": np.zeros((131072, 8), dtype=np.float16),
               "norm.weight": np.ones(8, dtype=np.float16)}, str(consolidated))
    target, draft = qwen_pair
    hub = FakeHub().start()
    hub.add_repo(TARGET, target, tags=("v1.0",))
    hub.add_repo(DRAFT, draft)
    hub.add_repo(PRIVATE, draft, token=TOKEN)
    hub.add_repo(GATED, draft, gated=True)
    hub.add_repo(SLOW, {
        "tokenizer.model": mistral_data() / MISTRAL_SPM["v1"],
        "tokenizer_config.json": json.dumps({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>",
                                             "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                                             "add_eos_token": False}).encode(),
        "config.json": json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                   "vocab_size": 32000, "hidden_size": 4096, "tie_word_embeddings": False,
                                   "bos_token_id": 1, "eos_token_id": 2}).encode(),
        "pytorch_model.bin": b"\x80\x02not really a pickle" * 4096,
    })
    hub.add_repo(MISTRAL_FORMAT, {
        "tekken.json": mistral_data() / "tekken_240911.json",
        "params.json": json.dumps({"dim": 8, "n_layers": 1, "vocab_size": 131072}).encode(),
        "consolidated.safetensors": consolidated,
    })
    yield hub
    hub.stop()


@pytest.fixture
def hub(server, monkeypatch, tmp_path):
    server.reset_counts()
    server.faults.clear()
    use_hub(monkeypatch, server.url, tmp_path / "hf-home")
    yield server
    server.faults.clear()



def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- compare and inspect: what is transferred ----------------------------------------------------------------------


def test_compare_hub_pair_transfers_tokenizer_configs_and_header_bytes_only(hub, cli, qwen_pair):
    target, draft = qwen_pair
    code, out, err = cli("compare", TARGET, DRAFT, "--json")
    assert code == 0, err
    assert err == ""  # no progress bar off a terminal, no library warnings
    document = json.loads(out)
    assert document["verdict"] == "padded-compatible"
    assert document["alignment"]["target_rows"] == 152064 and document["alignment"]["draft_rows"] == 151936

    commit = hub.repos[TARGET].commit
    side = document["target"]
    assert side["kind"] == "hub" and side["revision"] == commit
    assert side["provenance"]["tokenizer"] == f"hf://{TARGET}@{commit}/tokenizer.json"
    assert side["provenance"]["config"] == f"hf://{TARGET}@{commit}/config.json"
    assert side["provenance"]["tensors"].startswith(f"hf://{TARGET}@{commit}/model.safetensors.index.json")
    assert side["embeddings"] == {**side["embeddings"], "input_rows": 152064, "output_rows": 152064,
                                  "tied": False, "source": "tensors"}
    assert document["draft"]["embeddings"]["tied"] is True

    for repo, directory in ((TARGET, target), (DRAFT, draft)):
        served = hub.bytes_served(repo)
        small = {p.name: p.stat().st_size for p in directory.iterdir() if not p.name.endswith(".safetensors")}
        shards = sorted(p.name for p in directory.glob("*.safetensors"))
        # every tokenizer/config file once, whole; of each safetensors file its first 8 KiB (the header), no more
        assert served == {**small, **{name: HEADER_PROBE for name in shards}}
    safetensors_requests = [r for r in hub.requests if r.path.split("?")[0].endswith(".safetensors")]
    assert safetensors_requests and all(r.range == f"bytes=0-{HEADER_PROBE - 1}" for r in safetensors_requests)


def test_second_run_is_served_from_the_cache_and_offline_mode_works(hub, cli, monkeypatch, tmp_path):
    code, first, _ = cli("compare", TARGET, DRAFT, "--json")
    assert code == 0

    hub.reset_counts()
    code, second, _ = cli("compare", TARGET, DRAFT, "--json")
    assert code == 0 and json.loads(second) == json.loads(first)
    assert hub.bytes_served(TARGET) == {} and hub.bytes_served(DRAFT) == {}
    # one model-info call per model (the branch may have moved); files and headers come from the cache
    assert sorted(r.path for r in hub.requests if r.server == "hub") == sorted(
        f"/api/models/{repo}/revision/main?blobs=true" for repo in (TARGET, DRAFT))

    hub.reset_counts()
    use_hub(monkeypatch, hub.url, tmp_path / "hf-home", offline=True)
    code, offline, err = cli("compare", TARGET, DRAFT, "--json")
    assert code == 0, err
    assert json.loads(offline) == json.loads(first)
    assert hub.requests == []


def test_offline_works_from_a_cache_another_tool_filled(hub, monkeypatch, tmp_path):
    from huggingface_hub import snapshot_download

    snapshot_download(DRAFT)  # what `hf download` or transformers leave in the cache: no vocabcheck manifest
    hub.reset_counts()
    use_hub(monkeypatch, hub.url, tmp_path / "hf-home", offline=True)
    source = open_model(DRAFT)
    assert source.revision == hub.repos[DRAFT].commit
    assert source.tensors["model.embed_tokens.weight"].shape == (151936, 32)  # the header, read from the cached file
    assert hub.requests == []


def test_unreachable_hub_falls_back_to_the_cache_like_huggingface_hub(hub, cli, monkeypatch, tmp_path):
    assert cli("inspect", DRAFT, "--json")[0] == 0
    use_hub(monkeypatch, closed_port_url(), tmp_path / "hf-home")
    code, out, err = cli("inspect", DRAFT, "--json")
    assert code == 0, err
    assert json.loads(out)["revision"] == hub.repos[DRAFT].commit


def test_environment_variables_alone_configure_the_hub_client(server, tmp_path):
    """A fresh process configured only by HF_ENDPOINT, HF_HOME, HF_TOKEN and HF_HUB_OFFLINE, as users set them."""
    home = tmp_path / "hf-home"
    first = run_cli(server, home, ["inspect", PRIVATE, "--json"], extra_env={"HF_TOKEN": TOKEN})
    assert first.exit_code == 0, first.stderr
    commit = server.repos[PRIVATE].commit
    assert json.loads(first.stdout)["revision"] == commit
    snapshot = home / "hub" / "models--acme--private-draft" / "snapshots" / commit
    assert (snapshot / "tokenizer.json").is_file() and (home / "hub" / "models--acme--private-draft" / "refs" /
                                                          "main").read_text() == commit
    assert server.served[(PRIVATE, "tokenizer.json")] > 0

    offline = run_cli(server, home, ["inspect", PRIVATE, "--json"], offline=True)  # no token needed from the cache
    assert offline.exit_code == 0, offline.stderr
    assert offline.requests == 0
    assert json.loads(offline.stdout) == json.loads(first.stdout)


def test_revisions_tags_and_commits_resolve_to_the_commit_sha(hub):
    commit = hub.repos[TARGET].commit
    for spec in (f"{TARGET}@v1.0", f"{TARGET}@{commit}", TARGET):
        source = open_model(spec)
        assert source.revision == commit
        assert source.location == f"hf://{TARGET}@{commit}"
        assert source.provenance["tokenizer"] == f"hf://{TARGET}@{commit}/tokenizer.json"
    # the tag is recorded in the cache's refs/, where huggingface_hub looks for it offline
    assert (Path(hub_source._storage(TARGET)) / "refs" / "v1.0").read_text() == commit
    # a commit never moves: once cached, opening it asks the hub nothing
    hub.reset_counts()
    assert open_model(f"{TARGET}@{commit}").revision == commit
    assert hub.requests == []


def test_private_repo_needs_hf_token_and_the_token_stays_on_the_hub(hub, cli, monkeypatch):
    code, _, err = cli("inspect", PRIVATE)
    assert code == 2
    assert err.startswith(f"error: {PRIVATE}: repository not found") and "HF_TOKEN" in err

    hub.reset_counts()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    code, out, err = cli("inspect", PRIVATE, "--json")
    assert code == 0, err
    assert json.loads(out)["embeddings"]["input_rows"] == 151936
    hub_requests = [r for r in hub.requests if r.server == "hub"]
    assert hub_requests and all(r.authorized for r in hub_requests)
    cdn_requests = [r for r in hub.requests if r.server == "cdn"]
    assert cdn_requests and not any(r.authorized for r in cdn_requests)  # the server refuses a token there


def test_bin_only_repo_converts_the_tokenizer_and_never_touches_the_weights(hub, cli):
    code, out, err = cli("inspect", SLOW, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["tokenizer"]["size"] == 32000
    assert "converted by transformers" in document["provenance"]["tokenizer"]
    # pickled weights cannot be read through a header: the rows come from config.json, and say so
    assert document["embeddings"]["source"] == "config" and document["embeddings"]["input_rows"] == 32000
    assert set(hub.bytes_served(SLOW)) == {"tokenizer.model", "tokenizer_config.json", "config.json"}

    with pytest.raises(UnsupportedModel, match="no safetensors weights"):
        hub_source.download_weights(SLOW)
    assert "pytorch_model.bin" not in hub.bytes_served(SLOW)


def test_mistral_format_repo_uses_tekken_and_the_consolidated_header(hub):
    source = open_model(MISTRAL_FORMAT)
    commit = hub.repos[MISTRAL_FORMAT].commit
    assert source.provenance["tokenizer"] == \
        f"hf://{MISTRAL_FORMAT}@{commit}/tekken.json (Mistral Tekken, converted by transformers)"
    assert source.tokenizer.get_vocab_size(with_added_tokens=True) == 131072
    assert source.tensors["tok_embeddings.weight"].shape == (131072, 8)
    assert source.tensors["output.weight"].file == "consolidated.safetensors"
    assert hub.bytes_served(MISTRAL_FORMAT) == {"tekken.json": hub.repos[MISTRAL_FORMAT].files["tekken.json"].size,
                                                "consolidated.safetensors": HEADER_PROBE}


# --- download_weights ----------------------------------------------------------------------------------------------


def test_download_weights_fetches_the_safetensors_snapshot_once(hub, qwen_pair):
    target, _ = qwen_pair
    open_model(TARGET)  # the compatibility check comes first in `run`
    hub.reset_counts()

    directory = hub_source.download_weights(TARGET)
    shards = sorted(p.name for p in target.glob("*.safetensors"))
    served = hub.bytes_served(TARGET)
    assert served == {name: (target / name).stat().st_size for name in shards}
    for name in shards:
        assert sha256(directory / name) == sha256(target / name)
    local = find_checkpoint(directory)
    assert local is not None and local.tensors["lm_head.weight"].shape[0] == 152064
    assert open_model(str(directory)).tensors.keys() == open_model(TARGET).tensors.keys()

    hub.reset_counts()
    assert hub_source.download_weights(TARGET) == directory
    assert hub.bytes_served(TARGET) == {}


def test_run_with_hub_ids_downloads_weights_only_after_the_check(hub, cli, qwen_pair, mistral_json):
    """`vocabcheck run` on hub ids: a compatible pair downloads its safetensors and generates what the local pair
    generates; an incompatible pair is refused before any weight byte moves."""
    code, out, err = cli("run", TARGET, DRAFT, "--prompt", "def f(x):", "--max-new-tokens", "4", "--json")
    assert code == 0, err
    via_hub = json.loads(out)["sequences"][0]["token_ids"]
    served = hub.bytes_served(TARGET)
    # compare read each header (one range request), then the weights came whole
    assert all(served[p.name] == HEADER_PROBE + p.stat().st_size for p in qwen_pair[0].glob("*.safetensors"))
    code, out, _ = cli("run", str(qwen_pair[0]), str(qwen_pair[1]), "--prompt", "def f(x):",
                       "--max-new-tokens", "4", "--json")
    assert json.loads(out)["sequences"][0]["token_ids"] == via_hub

    hub.add_repo("mistralai/tokenizer-v1", {"tokenizer.json": mistral_json("v1"),
                                             "config.json": json.dumps({"vocab_size": 32000}).encode()})
    hub.reset_counts()
    code, _, err = cli("run", "mistralai/tokenizer-v1", DRAFT, "--prompt", "x", "--max-new-tokens", "2")
    assert code == 1 and "refused: the pair is incompatible" in err
    assert not any(name.endswith(".safetensors") and size > HEADER_PROBE
                   for repo in (DRAFT, "mistralai/tokenizer-v1") for name, size in hub.bytes_served(repo).items())


def test_progress_is_drawn_on_a_terminal_and_never_when_turned_off(hub, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with show_progress(False):
        open_model(DRAFT, read_checkpoint=False)
    assert terminal.getvalue() == ""

    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    with show_progress():  # what the CLI registers: on a terminal, unless turned off
        hub_source.download_weights(TARGET)  # progress off by the variable users know from huggingface_hub
    assert terminal.getvalue() == ""

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
    with show_progress():
        hub_source.download_weights(DRAFT)
    drawn = terminal.getvalue()
    assert f"{DRAFT} model.safetensors" in drawn and "MB" in drawn


def test_progress_bars_take_what_huggingface_hub_drives_them_with():
    """With hf_xet installed (the default on x86-64 and arm64), huggingface_hub reports a download through its Xet
    reporter, which opens two bars and sets totals and postfixes on them; each file must still show once."""
    import logging

    from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter
    from rich.console import Console
    from rich.progress import Progress

    class Report:  # the counters hf_xet hands to the reporter
        total_bytes, total_bytes_completed, total_transfer_bytes_completed = 1000, 600, 450
        total_bytes_completion_rate = total_transfer_bytes_completion_rate = 2e6

    with Progress(console=Console(file=io.StringIO(), force_terminal=True)) as progress:
        factory = hub_source._bar_factory(TerminalProgress(progress=progress), f"{DRAFT} model.safetensors")
        with XetDownloadProgressReporter(reconstruction_desc="model.safetensors", total=1000,
                                         log_level=logging.WARNING, tqdm_class=factory) as reporter:
            reporter.update_progress(Report())
            (task,) = progress.tasks
            assert (task.description, task.completed, task.total) == (f"{DRAFT} model.safetensors", 600, 1000)
        assert progress.tasks == []

        bar = hub_source._bar_factory(TerminalProgress(progress=progress), "plain http")(total=100, initial=0,
                                                                                         desc="x", unit="B")
        with bar:  # huggingface_hub's http_get: updates, and a rewind when a server ignores a resume range
            bar.update(70)
            bar.update(-70)
            bar.update(100)
            assert progress.tasks[0].completed == 100
        assert progress.tasks == []


# --- failures: one line naming the spec, exit code 2 ---------------------------------------------------------------


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def one_error_line(err: str, spec: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}: "), err
    return lines[0]


@pytest.mark.parametrize(("spec", "fault", "expected"), [
    ("nobody/no-such-model", None, "repository not found on http://127.0.0.1"),
    (f"{TARGET}@v9.9", None, "revision 'v9.9' not found in Qwen/Qwen2.5-7B-Instruct"),
    (GATED, None, "gated repository: your token has no access"),
    (DRAFT, (DRAFT, None, "500"), "answered HTTP 500 (server error)"),
    (DRAFT, (DRAFT, "tokenizer.json", "drop"), "the connection broke while downloading tokenizer.json"),
    (DRAFT, (DRAFT, "model.safetensors", "drop:100"), "broke while downloading model.safetensors"),
    (DRAFT, (DRAFT, "tokenizer.json", "length"), "download of tokenizer.json was incomplete: the hub announced "
                                                  "5,362,689 bytes and sent 5,362,589"),
])
def test_hub_failures_are_one_line_and_exit_2(hub, cli, monkeypatch, spec, fault, expected):
    import huggingface_hub.file_download as file_download

    if fault is not None:
        hub.fault(*fault)
    # huggingface_hub retries a broken download five times, a second apart; the count stays, the waiting goes
    monkeypatch.setattr(file_download.time, "sleep", lambda seconds: None)
    code, out, err = cli("compare", spec, DRAFT)
    assert code == 2 and out == ""
    assert expected in one_error_line(err, spec)
    assert "Traceback" not in err


def test_no_network_and_offline_without_cache_are_one_line(hub, cli, monkeypatch, tmp_path):
    use_hub(monkeypatch, closed_port_url(), tmp_path / "other-home")
    code, _, err = cli("inspect", DRAFT)
    assert code == 2
    line = one_error_line(err, DRAFT)
    assert "cannot reach the hub at http://127.0.0.1" in line and "not in the local cache" in line

    use_hub(monkeypatch, hub.url, tmp_path / "empty-home", offline=True)
    code, _, err = cli("inspect", f"{DRAFT}@main")
    assert code == 2
    assert "HF_HUB_OFFLINE is set, and Qwen/Qwen2.5-0.5B-Instruct@main is not in the local cache" in \
        one_error_line(err, f"{DRAFT}@main")
    assert hub.requests == []


def test_library_errors_carry_the_spec(hub):
    with pytest.raises(SourceNotFound) as missing:
        open_model("nobody/no-such-model")
    assert missing.value.where == "nobody/no-such-model"
    hub.fault(DRAFT, None, "500")
    with pytest.raises(RemoteError) as failed:
        open_model(DRAFT)
    assert failed.value.where == DRAFT
