"""What the behavioural cache check costs next to loading the model it checks (``reports/cache-check.md``).

For each model: the time ``load_model`` takes to read its weights from disk onto the device (what every `run` and
`bench` pays; every page of every weight is read once inside the timed load, so a load that maps the file counts
its reads), and the time of the check on it (:func:`vocabcheck.decode.load.cache_check.cache_problem`): its first call
(what a run pays) and the median of ``--repeat`` more. Two pairs:

1. the demo pair (Qwen2.5-shaped target and draft, trained, under ``~/.cache/vocabcheck``);
2. the Qwen2.5-1.5B-shaped target and Qwen2.5-0.5B-shaped draft that ``benchmarks/gpu_check.py`` builds (random
   weights, the real Qwen2.5 tokenizer and vocabulary of 151,936 rows), saved to a scratch directory and loaded
   from it. ``--layers N`` keeps the first N decoder layers of each (all of them by default on CUDA, 2 on the CPU,
   where a full-size model would not fit the benchmark's time): the check and the load both grow with the layers.

Run from the repository root:

    python -m benchmarks.cache_check --out reports/cache-check.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.compare_speed import machine_line, publish
from benchmarks.gpu_check import QWEN25_0_5B, QWEN25_1_5B


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers of the real-size shapes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from vocabcheck.decode.device import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    dtype = resolve_dtype("auto", device)
    layers = args.layers or (None if device.type == "cuda" else 2)
    load_before = os.getloadavg()[0]
    rows = [*demo_rows(device, dtype, args.repeat)]
    with tempfile.TemporaryDirectory() as scratch:
        rows += real_size_rows(Path(scratch), device, dtype, layers, args.repeat)
    command = "python -m benchmarks.cache_check " + " ".join(argv if argv is not None else sys.argv[1:])
    publish(report(rows, command, device, dtype, layers, machine_line(load_before)), args.out)
    return 0


def measure(name: str, directory: Path, device, dtype, repeat: int) -> dict:
    """Load the model from ``directory`` (after a first load that warms the file cache and the imports), then time
    the check: its first call on this model, and the median of ``repeat`` more."""
    from vocabcheck.decode.load.cache_check import cache_problem
    from vocabcheck.decode.load.loading import load_model
    from vocabcheck.profile import profile_of

    profile = profile_of(str(directory))
    load_model(profile, device, dtype)  # dropped at once: the second load is the one timed
    began = _now(device)
    model = load_model(profile, device, dtype)
    _read_every_page(model)
    loaded = _now(device)
    problem = cache_problem(model)
    first = _now(device) - loaded
    again = []
    for _ in range(repeat):
        start = _now(device)
        cache_problem(model)
        again.append(_now(device) - start)
    row = {"model": name, "load_s": loaded - began, "check_first_s": first, "check_s": statistics.median(again),
           "passed": problem is None, "parameters": sum(p.numel() for p in model.parameters())}
    return row


def demo_rows(device, dtype, repeat: int) -> list[dict]:
    from vocabcheck.demo.pair import demo_pair

    pair = demo_pair()
    return [measure("demo target (Qwen2.5-shaped, trained)", pair.target, device, dtype, repeat),
            measure("demo draft (Qwen2.5-shaped, trained)", pair.draft, device, dtype, repeat)]


def real_size_rows(scratch: Path, device, dtype, layers: int | None, repeat: int) -> list[dict]:
    """The shapes gpu_check.py builds, saved with random weights in ``dtype`` and loaded back."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vocabcheck.demo import qwen

    tokenizer = qwen.cached_tokenizer_json(scratch / "tokenizer")
    rows = []
    for name, shape, seed in (("Qwen2.5-1.5B-shaped target", QWEN25_1_5B, 11),
                              ("Qwen2.5-0.5B-shaped draft", QWEN25_0_5B, 12)):
        kept = layers or shape.layers
        config = Qwen2Config(vocab_size=qwen.ROWS_SMALL, hidden_size=shape.hidden, num_hidden_layers=kept,
                             num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                             intermediate_size=shape.intermediate, tie_word_embeddings=True,
                             architectures=["Qwen2ForCausalLM"], eos_token_id=qwen.ENDOFTEXT)
        directory = scratch / name.split()[0]
        torch.manual_seed(seed)
        Qwen2ForCausalLM(config).to(dtype).save_pretrained(directory)
        (directory / "tokenizer.json").write_bytes(tokenizer.read_bytes())
        (directory / "tokenizer_config.json").write_text(json.dumps(qwen.tokenizer_config()))
        label = f"{name}, {kept} of {shape.layers} layers, random weights"
        rows.append(measure(label, directory, device, dtype, repeat))
    return rows


def report(rows: list[dict], command: str, device, dtype, layers: int | None, machine: str) -> list[str]:
    lines = ["# What the behavioural cache check costs next to loading", "",
             f"Command: `{command}`", "",
             f"- device: {device}, dtype {str(dtype).removeprefix('torch.')}; torch {torch.__version__}",
             machine, ""]
    if layers is not None:
        lines += [f"The real-size shapes keep the first {layers} decoder layers of each model on this device "
                  "(embeddings and output head at full size); load and check both grow with the layers.", ""]
    lines += ["| model | parameters | load | check (first call) | check (median) | check / load | passed |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        lines.append(f"| {row['model']} | {row['parameters'] / 1e6:,.1f} M | {row['load_s']:.3f} s | "
                     f"{row['check_first_s']:.3f} s | {row['check_s']:.3f} s | "
                     f"{row['check_first_s'] / row['load_s']:.1%} | {'yes' if row['passed'] else 'NO'} |")
    return lines


def _read_every_page(model) -> None:
    """Touch one element per 4 KiB of every weight: where the load mapped the file rather than read it, the time
    to read it counts as loading, not as the check's first forward."""
    with torch.inference_mode():
        for parameter in model.parameters():
            float(parameter.reshape(-1)[::max(1, 4096 // parameter.element_size())].sum())


def _now(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


if __name__ == "__main__":
    raise SystemExit(main())
