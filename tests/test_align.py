"""`vocabcheck align`: the aligned draft loads with transformers, gives the original draft's logits bit for bit on
every row it kept, never lets a padded row win a greedy step, compares identical to the target, keeps every other
tensor byte for byte, stays tied when tied, streams shard by shard within a stated memory bound, and prints engine
command lines whose keys and types match the documentation cited in vocabcheck.engines.commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from vocabcheck import aligner, compare, rewrite
from vocabcheck.engines import commands as engines
from vocabcheck.demo import qwen
from vocabcheck.demo.checkpoint import ModelShape, write_model
from vocabcheck.render.data import schema

SMALL, LARGE = qwen.ROWS_SMALL, qwen.ROWS_LARGE  # 151,936 and 152,064 rows
PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "人工智能正在改变世界。",
    "Emoji: 🚀🔥 and numbers 1234567890",
    "<|im_start|>user\nList three capitals.<|im_end|>\n<|im_start|>assistant\n",
)


def tensors(directory: Path) -> dict[str, tuple[str, torch.Tensor]]:
    """Every tensor of a checkpoint directory: name → (file, tensor)."""
    found = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                found[name] = (path.name, f.get_tensor(name))
    return found


def metadata(path: Path) -> dict:
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                                                     b.contiguous().view(torch.uint8))


@pytest.fixture(scope="module")
def padded(cli, qwen_pair, tmp_path_factory):
    """Draft smaller (151,936 rows, tied, one file) → padded to the target's 152,064, through the CLI with --json."""
    target, draft = qwen_pair
    out = tmp_path_factory.mktemp("align") / "aligned-pad"
    code, stdout, stderr = cli("align", str(target), str(draft), "--out", str(out), "--json",
                               "--tensor-parallel-size", "4", "--draft-tensor-parallel-size", "4", "-k", "4")
    assert code == 0, stderr
    return target, draft, out, json.loads(stdout)


@pytest.fixture(scope="module")
def cut(qwen_pair, tmp_path_factory):
    """Draft larger (152,064 rows, untied, three shards) → cut to the target's 151,936, through the library."""
    small, large = qwen_pair[1], qwen_pair[0]
    out = tmp_path_factory.mktemp("align") / "aligned-cut"
    result = aligner.align_draft(str(small), str(large), out)
    return small, large, out, result


@pytest.fixture(scope="module")
def causal_lm():
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def load(path: Path):
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        return model.eval()

    return load


def prompt_ids(model_dir: Path) -> list[list[int]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return [tokenizer.encode(text).ids for text in PROMPTS]


# --------------------------------------------------------------------------------------------------------------------
# the document and the verdict afterwards


def test_padded_json_validates_and_describes_the_rewrite(padded):
    target, draft, out, document = padded
    jsonschema.validate(document, schema("align-1"))
    assert document["status"] == "aligned" and document["exit_code"] == 0
    assert document["verdict"] == "padded-compatible"
    aligned = document["aligned"]
    assert aligned["verdict_after"] == "identical"
    assert aligned["tied"] is True
    assert [(t["name"], t["role"], t["source_rows"], t["rows"], t["added_rows"]) for t in aligned["tensors"]] == [
        ("model.embed_tokens.weight", "input embedding", SMALL, LARGE, LARGE - SMALL)]
    assert "target:tokenizer.json" in aligned["copied"] and "draft:generation_config.json" in aligned["copied"]
    assert aligned["generation_config"] == "draft"


@pytest.mark.parametrize("case", ["padded", "cut"])
def test_compare_target_with_aligned_draft_is_identical(cli, case, request):
    target, _, out, _ = request.getfixturevalue(case)
    code, stdout, stderr = cli("compare", str(target), str(out), "--json")
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["verdict"] == "identical"
    assert document["alignment"]["mapping"] == "same"
    assert document["draft"]["config_vocab_size"] == document["target"]["embeddings"]["output_rows"]


# --------------------------------------------------------------------------------------------------------------------
# the checkpoint on disk


def test_padded_rows_are_zero_and_the_tied_draft_stays_tied(padded):
    target, draft, out, _ = padded
    new, old = tensors(out), tensors(draft)
    assert "lm_head.weight" not in new and "lm_head.weight" not in old
    embed = new["model.embed_tokens.weight"][1]
    source = old["model.embed_tokens.weight"][1]
    assert embed.shape == (LARGE, source.shape[1]) and embed.dtype == source.dtype
    assert same_bytes(embed[:SMALL], source)
    assert not embed[SMALL:].any()
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == LARGE and config["tie_word_embeddings"] is True
    assert metadata(out / "model.safetensors") == metadata(draft / "model.safetensors") == {"format": "pt"}
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (target / name).read_bytes()
    assert (out / "generation_config.json").read_bytes() == (draft / "generation_config.json").read_bytes()


@pytest.mark.parametrize("case", ["padded", "cut"])
def test_every_other_tensor_is_byte_identical(case, request):
    _, draft, out, _ = request.getfixturevalue(case)
    new, old = tensors(out), tensors(draft)
    vocab = {"model.embed_tokens.weight", "lm_head.weight"}
    assert set(new) == set(old)
    others = sorted(set(old) - vocab)
    assert len(others) == 25
    for name in others:
        assert new[name][0] == old[name][0], name  # same shard
        assert same_bytes(new[name][1], old[name][1]), name


def test_cut_drops_only_the_rows_the_target_lacks_and_rewrites_the_index(cut):
    target, draft, out, result = cut
    assert result.verdict_after.value == "identical"
    new, old = tensors(out), tensors(draft)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert new[name][1].shape == (SMALL, old[name][1].shape[1])
        assert same_bytes(new[name][1], old[name][1][:SMALL])
    assert sorted(p.name for p in out.glob("*.safetensors")) == sorted(p.name for p in draft.glob("*.safetensors"))
    for path in out.glob("*.safetensors"):
        assert metadata(path) == metadata(draft / path.name)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {name: file for name, (file, _) in new.items()}
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for _, t in new.values())
    assert index["metadata"]["total_parameters"] == sum(t.numel() for _, t in new.values())
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == SMALL and config["tie_word_embeddings"] is False
    assert any("dropped the draft's rows 151,936–152,063" in n for n in result.plan.notes)


# --------------------------------------------------------------------------------------------------------------------
# the model: transformers loads it and it computes what the original draft computed


@pytest.mark.parametrize("case", ["padded", "cut"])
def test_logits_on_every_kept_row_are_bit_identical(case, request, causal_lm):
    target, draft, out, _ = request.getfixturevalue(case)
    original, aligned = causal_lm(draft), causal_lm(out)
    kept = min(SMALL, LARGE)
    for ids in prompt_ids(target):
        batch = torch.tensor([ids])
        with torch.no_grad():
            a = aligned(batch).logits
            o = original(batch).logits
        assert a.shape[-1] == (LARGE if case == "padded" else SMALL)
        assert torch.equal(a[..., :kept], o[..., :kept])
        if case == "padded":
            assert not a[..., kept:].any()  # a zero row gives logit 0 exactly


def test_padded_ids_never_win_a_greedy_step(padded, causal_lm):
    target, draft, out, _ = padded
    original, aligned = causal_lm(draft), causal_lm(out)
    steps = 0
    for ids in prompt_ids(target):
        sequence = list(ids)
        for _ in range(12):
            with torch.no_grad():
                a = aligned(torch.tensor([sequence]), logits_to_keep=1).logits[0, -1]
                o = original(torch.tensor([sequence]), logits_to_keep=1).logits[0, -1]
            choice = int(a.argmax())
            assert choice < SMALL, f"padded row {choice} won a greedy step"
            assert choice == int(o.argmax())
            sequence.append(choice)
            steps += 1
    assert steps == len(PROMPTS) * 12


# --------------------------------------------------------------------------------------------------------------------
# refusals and the output directory


def test_incompatible_pair_is_refused_with_exit_1(cli, qwen_pair, mistral_json, tmp_path):
    target = qwen_pair[0]
    out = tmp_path / "never"
    code, stdout, stderr = cli("align", str(target), str(mistral_json("v1")), "--out", str(out), "--json")
    assert code == 1
    assert "align refuses an incompatible pair" in stderr and "vocab.conflict" in stderr
    assert len(stderr.strip().splitlines()) == 1
    document = json.loads(stdout)
    jsonschema.validate(document, schema("align-1"))
    assert document["status"] == "refused" and document["aligned"] is None and document["commands"] == []
    assert not out.exists()
    from vocabcheck.errors import RefusedPair

    with pytest.raises(RefusedPair):
        aligner.plan(compare(str(target), str(mistral_json("v1")), probe=False))


def test_out_must_be_empty_unless_forced_and_an_aligned_draft_aligns_unchanged(cli, padded, tmp_path):
    target, _, first, _ = padded
    out = tmp_path / "again"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, stderr = cli("align", str(target), str(first), "--out", str(out))
    assert code == 2 and "--force" in stderr and (out / "keep.txt").read_text() == "mine"
    code, stdout, stderr = cli("align", str(target), str(first), "--out", str(out), "--force")
    assert code == 0, stderr
    assert not (out / "keep.txt").exists()
    assert "unchanged" in stdout and "IDENTICAL" in stdout
    new, old = tensors(out), tensors(first)
    assert set(new) == set(old) and all(same_bytes(new[n][1], old[n][1]) for n in old)


def test_target_needs_no_weights_only_config_and_tokenizer(cli, qwen_pair, tmp_path):
    """A 70B target need not be downloaded: its config.json vocab_size and tokenizer files are enough."""
    target, draft = qwen_pair
    light = tmp_path / "target-without-weights"
    light.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (light / name).write_bytes((target / name).read_bytes())
    out = tmp_path / "aligned"
    code, stdout, stderr = cli("align", str(light), str(draft), "--out", str(out), "--json")
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["alignment"]["rows_source"] == "config/tensors"
    assert document["aligned"]["tensors"][0]["rows"] == LARGE
    code, stdout, _ = cli("compare", str(target), str(out), "--json")  # and against the real target's tensors
    assert code == 0 and json.loads(stdout)["verdict"] == "identical"


def test_config_json_is_written_ascii_safe_as_transformers_writes_it(cli, qwen_pair, tmp_path):
    """A draft whose config.json carries non-ASCII text — a bidi override, a C1 control, accents, CJK — gets a
    config.json of ASCII only, every such character a JSON escape (as transformers' own ``to_json_file`` writes it):
    nothing a terminal acts on reaches ``cat config.json``, and it reads back to the same values."""
    import shutil

    target, draft = qwen_pair
    hostile = tmp_path / "draft"
    shutil.copytree(draft, hostile)
    config = json.loads((hostile / "config.json").read_text(encoding="utf-8"))
    name = "drafts/m\u202eodel-\x85-é-人工智能-🚀"
    config["_name_or_path"] = name
    (hostile / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "aligned"
    code, _, stderr = cli("align", str(target), str(hostile), "--out", str(out))
    assert code == 0, stderr
    written = (out / "config.json").read_bytes()
    assert written.isascii(), [c for c in written.decode("utf-8") if ord(c) > 127]
    aligned = json.loads(written)
    assert aligned["_name_or_path"] == name and aligned["vocab_size"] == LARGE
    assert {k: v for k, v in aligned.items() if k != "vocab_size"} == \
        {k: v for k, v in config.items() if k != "vocab_size"}


def test_out_may_not_be_an_input(cli, qwen_pair):
    target, draft = qwen_pair
    before = sorted(p.name for p in draft.iterdir())
    code, _, stderr = cli("align", str(target), str(draft), "--out", str(draft), "--force")
    assert code == 2 and "replace an input" in stderr
    assert sorted(p.name for p in draft.iterdir()) == before


def test_invalid_draft_tensor_parallel_size_exits_2_before_any_work(cli, qwen_pair, tmp_path):
    target, draft = qwen_pair
    out = tmp_path / "never"
    code, _, stderr = cli("align", str(target), str(draft), "--out", str(out), "--tensor-parallel-size", "4",
                          "--draft-tensor-parallel-size", "2")
    assert code == 2 and "draft-tensor-parallel-size must be 1 or" in stderr
    assert not out.exists()


# --------------------------------------------------------------------------------------------------------------------
# streaming: bytes, dtypes, metadata, chunks, memory


def test_rewrite_shard_keeps_dtypes_bytes_and_metadata_in_small_chunks(tmp_path):
    torch.manual_seed(0)
    source = {"embed.weight": torch.randn(10, 4).to(torch.bfloat16), "steps": torch.arange(6, dtype=torch.int64),
              "norm.weight": torch.randn(4).to(torch.float16), "odd.weight": torch.randn(3, 5)}
    src = tmp_path / "in.safetensors"
    save_file(source, str(src), metadata={"format": "pt", "origin": "test"})
    for rows in (13, 7, 10):
        dst = tmp_path / f"out-{rows}.safetensors"
        report = rewrite.rewrite_shard(src, dst, {"embed.weight": rows}, chunk_bytes=8)  # one row per chunk
        assert report.resized == ("embed.weight",) and report.tensors == 4
        new = {name: t for name, (_, t) in tensors_of(dst).items()}
        assert metadata(dst) == {"format": "pt", "origin": "test"}
        for name in ("steps", "norm.weight", "odd.weight"):
            assert same_bytes(new[name], source[name]), name
        embed = new["embed.weight"]
        assert embed.dtype == torch.bfloat16 and embed.shape == (rows, 4)
        kept = min(rows, 10)
        assert same_bytes(embed[:kept], source["embed.weight"][:kept])
        assert not embed[kept:].any()


def tensors_of(path: Path) -> dict[str, tuple[str, torch.Tensor]]:
    with safe_open(str(path), framework="pt") as f:
        return {name: (path.name, f.get_tensor(name)) for name in f.keys()}


MEMORY_PROBE = r"""
import json, resource, sys
from pathlib import Path
import torch, safetensors, safetensors.torch
from vocabcheck import rewrite

args = json.loads(sys.argv[1])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
baseline = status("VmRSS")  # after the interpreter, torch, safetensors and vocabcheck are imported
try:
    with open("/proc/self/clear_refs", "w") as handle:  # reset the peak (VmHWM) to the current RSS
        handle.write("5")
    reset = status("VmHWM") <= baseline + (1 << 20)
except OSError:
    reset = False
rewrite.rewrite_checkpoint(Path(args["draft"]), tuple(args["shards"]), args["index"], Path(args["out"]),
                           args["rows"], chunk_bytes=args["chunk"])
# without the reset, ru_maxrss may include the imports' own peak: an upper bound on the rewrite's
peak = status("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"baseline": baseline, "peak": peak, "reset": reset}))
"""


@pytest.fixture(scope="module")
def sharded_draft(fixture_root, qwen25_json):
    """An untied 151,936-row draft in 5 shards whose largest shard (the input embedding) is 40% of the model."""
    directory = fixture_root / "models" / "align-memory-draft-151936"
    if not directory.is_dir():
        shape = ModelShape(rows=SMALL, hidden=64, layers=6, heads=4, kv_heads=2, intermediate=4096, tied=False,
                           shard_bytes=8_000_000, seed=5)
        write_model(directory, shape, tokenizer_json=qwen25_json, tokenizer_config=qwen.tokenizer_config(),
                    generation_config=qwen.generation_config())
    return directory


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak RSS from /proc (Linux)")
def test_peak_memory_stays_below_largest_shard_plus_stated_bound(qwen_pair, sharded_draft, tmp_path):
    target = qwen_pair[0]
    plan = aligner.plan(compare(str(target), str(sharded_draft), probe=False))
    shard_sizes = [(sharded_draft / s).stat().st_size for s in plan.shards]
    model_bytes = sum(shard_sizes)
    chunk = 4 * 1024 * 1024
    bound = rewrite.memory_bound(max(shard_sizes), plan.added_bytes, chunk)
    assert len(shard_sizes) >= 4 and bound < model_bytes  # passing the bound means the model was never all in memory
    out = tmp_path / "aligned"
    out.mkdir()
    args = {"draft": str(sharded_draft), "shards": list(plan.shards), "index": plan.index, "out": str(out),
            "rows": plan.rows, "chunk": chunk}
    probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE, json.dumps(args)], capture_output=True, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert probe.returncode == 0, probe.stderr
    measured = json.loads(probe.stdout)
    rise = measured["peak"] - measured["baseline"]
    print(f"\npeak rise {rise / 2**20:.1f} MiB; largest shard {max(shard_sizes) / 2**20:.1f} MiB; bound "
          f"{bound / 2**20:.1f} MiB; model {model_bytes / 2**20:.1f} MiB; HWM reset: {measured['reset']}")
    assert rise < bound
    written = tensors(out)
    assert written["model.embed_tokens.weight"][1].shape[0] == LARGE == written["lm_head.weight"][1].shape[0]


# --------------------------------------------------------------------------------------------------------------------
# engine command lines against the documented keys


def test_vllm_speculative_config_matches_the_cited_keys_and_types(padded):
    _, _, out, document = padded
    vllm = next(c for c in document["commands"] if c["engine"] == "vllm")
    argv = vllm["argv"]
    assert argv[:3] == ["vllm", "serve", str(padded[0])]
    assert engines.check_flags(argv[3:], engines.VLLM_SERVE_FLAGS) == []
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == vllm["speculative_config"] == {"model": str(out), "method": "draft_model",
                                                    "num_speculative_tokens": 4, "draft_tensor_parallel_size": 4}
    assert engines.check_speculative_config(config, target_tensor_parallel_size=4) == []
    # the table the check uses is the one cited in vocabcheck.engines.commands: vLLM's documented names and types
    assert {k: s.type for k, s in engines.VLLM_SPECULATIVE_CONFIG.items()} == {
        "model": str, "method": str, "num_speculative_tokens": int, "draft_tensor_parallel_size": int}
    assert vllm["command"].startswith("vllm serve ") and "'{\"model\": " in vllm["command"]


def test_the_key_check_is_not_vacuous():
    good = {"model": "d", "method": "draft_model", "num_speculative_tokens": 3}
    assert engines.check_speculative_config(good) == []
    bad = [
        ({**good, "num_speculative_tokens": True}, "must be an integer"),
        ({**good, "num_speculative_tokens": 0}, "at least 1"),
        ({**good, "tensor_parallel_size": 2}, "rejects the key"),
        ({**good, "speculative_model": "d"}, "unknown key"),
        ({k: v for k, v in good.items() if k != "method"}, "missing key"),
        ({**good, "draft_tensor_parallel_size": 3}, "must be 1 or the target's"),
    ]
    for config, problem in bad:
        assert any(problem in p for p in engines.check_speculative_config(config, target_tensor_parallel_size=4))
    assert engines.check_flags(["--tp", "2"], engines.SGLANG_FLAGS) == ["undocumented flag --tp"]


def test_sglang_command_uses_documented_flags(padded):
    target, _, out, document = padded
    sglang = next(c for c in document["commands"] if c["engine"] == "sglang")
    argv = sglang["argv"]
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert engines.check_flags(argv[3:], engines.SGLANG_FLAGS) == []
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert flags == {"--model-path": str(target), "--tp-size": "4", "--speculative-algorithm": "STANDALONE",
                     "--speculative-draft-model-path": str(out), "--speculative-num-steps": "4",
                     "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "5"}
