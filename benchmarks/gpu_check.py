"""The decoder on a GPU, in one command: what needs CUDA to be checked, and the benchmark at a size where a GPU
matters. It writes a report directory (by default reports/gpu/):

1. the ``gpu``-marked tests (``pytest -m gpu``: CUDA greedy equals plain decoding through the CLI; every step of the
   loop synchronises with the host once, under ``torch.cuda.set_sync_debug_mode("error")``);
2. greedy losslessness in float32 on the device, against transformers' own ``generate`` of the target alone, row by
   row: a padded pair (target rows > draft rows), a cut pair (draft rows > target rows) and a sliding-window target,
   in batches with left padding, for the draft and n-gram methods;
3. in bfloat16, how often speculative greedy output equals plain bfloat16 greedy output. A verification pass over
   k + 1 tokens runs other kernel shapes than a one-token step, so bfloat16 rounding can flip a near tie: the rate
   is reported as measured, not promised;
4. ``vocabcheck bench``'s table (none / n-gram / draft, batch 1 and 16, k = 4, with --compare-hf) on a randomly
   initialised Qwen2.5-shaped pair built on the device, no downloads: a Qwen2.5-1.5B-shaped target and a
   Qwen2.5-0.5B-shaped draft. Random weights make the draft's acceptance low: the figures show the engine's cost
   on real shapes, not a trained pair's speedup.

Each part has a deadline (``--part-deadline``, and what is left of ``--deadline`` for the whole run): a part that
runs past it is stopped and reported as timed out, the next part runs, and the report is rewritten after every part,
so one stuck part still leaves a report. The pytest child runs under the same deadline (its process group is killed
when it passes). The benchmark part times draft and target phases only where that is free (the CPU); on CUDA its
phase split comes from a separate timing pass, so the measured TPOT is what ``vocabcheck run`` does.

Run from a clean checkout after the README's install:

    python benchmarks/gpu_check.py --out reports/gpu

``--tiny`` runs every part at toy sizes, and ``--device cpu`` on the CPU: that is how the test suite checks the
script where no GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


QWEN25_1_5B = Shape(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960)
QWEN25_0_5B = Shape(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864)
TINY_TARGET = Shape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)
TINY_DRAFT = Shape(hidden=32, layers=1, heads=4, kv_heads=2, intermediate=64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "gpu")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (a check of the script itself)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu")
    parser.add_argument("--deadline", type=float, default=720.0, help="seconds for the whole run (default 720)")
    parser.add_argument("--part-deadline", type=float, default=300.0, help="seconds for one part (default 300)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA device; use --device cpu --tiny to check the "
              "script itself", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    clock = Deadlines(time.monotonic() + args.deadline, args.part_deadline)
    report = {"machine": machine(device), "command": "python benchmarks/gpu_check.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "parts": {}, "tests": None, "lossless_float32": None,
        "bfloat16_match": None, "bench": None, "seconds": 0.0}

    def part(key: str, what: str, function, *part_args, **kwargs):
        report[key] = clock.run(report["parts"], what, function, *part_args, **kwargs)
        report["seconds"] = round(time.monotonic() - clock.started, 1)
        write(args.out, report)
        return report[key]

    if not args.skip_tests:
        part("tests", "gpu tests", gpu_tests, args.out, clock)
    ks = (4,) if args.tiny else (1, 4, 8)
    part("lossless_float32", "float32 losslessness", lossless_checks, device, ks=ks)
    with tempfile.TemporaryDirectory() as scratch:
        session = clock.run(report["parts"], "Qwen2.5-shaped pair", qwen_shaped_session, Path(scratch), device,
                            tiny=args.tiny)
        if session is not None:
            part("bfloat16_match", "bfloat16 match", bf16_match, session, tiny=args.tiny)
            part("bench", "bench", bench, session, args.out, tiny=args.tiny, command=report["command"])
    write(args.out, report)
    complete = all(p["status"] == "ok" for p in report["parts"].values())
    ok = complete and all(case["lossless"] for case in report["lossless_float32"] or []) and (
        report["tests"] is None or report["tests"]["exit_code"] == 0)
    print(f"gpu_check: {'ok' if ok else 'FAILED'} in {report['seconds']} s; report in {args.out}")
    return 0 if ok else 1


class PartTimedOut(BaseException):
    """A part ran past its deadline. A BaseException, like KeyboardInterrupt: code that turns a library's failure
    into a note (a peer's failed cell in the bench) lets it through."""


class Deadlines:
    """The whole run's deadline and each part's: a part gets the smaller of its own limit and what is left."""

    def __init__(self, end: float, per_part: float):
        self.started, self.end, self.per_part = time.monotonic(), end, per_part

    def budget(self) -> float:
        return max(0.0, min(self.per_part, self.end - time.monotonic()))

    def run(self, parts: dict, what: str, function, *args, **kwargs):
        """``function`` under the part's deadline (SIGALRM in this, the main thread); its status goes in ``parts``.
        None where it timed out, failed, or there was no time left to start it."""
        budget = self.budget()
        start = time.monotonic()
        if budget <= 0:
            parts[what] = {"status": "not run", "seconds": 0.0, "reason": "the run's deadline had passed"}
            return None
        print(f"gpu_check: {what} (deadline {budget:.0f} s)...", file=sys.stderr, flush=True)
        try:
            with _alarm(budget):
                result = function(*args, **kwargs)
        except PartTimedOut:
            status, reason, result = "timed out", f"stopped after its deadline of {budget:.0f} s", None
        except Exception as exc:  # one broken part must not cost the others their report
            status, reason, result = "failed", f"{type(exc).__name__}: {str(exc).strip()[:300]}", None
        else:
            status, reason = "ok", ""
        seconds = round(time.monotonic() - start, 1)
        parts[what] = {"status": status, "seconds": seconds, "reason": reason}
        print(f"gpu_check: {what}: {status} in {seconds:.1f} s {reason}".rstrip(), file=sys.stderr, flush=True)
        return result


@contextmanager
def _alarm(seconds: float):
    def expired(signum, frame):
        raise PartTimedOut()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def write(out: Path, report: dict) -> None:
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu-check.md").write_text(markdown(report))


def machine(device: torch.device) -> dict:
    info = {"torch": torch.__version__, "python": platform.python_version(), "device": str(device)}
    if device.type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                    memory_gib=round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1))
    return info


def gpu_tests(out: Path, clock: Deadlines) -> dict:
    """``pytest -m gpu``, its log kept beside the report; its process group is killed at the part's deadline."""
    log = out / "pytest-gpu.log"
    with open(log, "w") as sink:
        child = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"],
                                 cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            code = child.wait(timeout=max(clock.budget() - 5.0, 1.0))
        except BaseException as exc:  # the deadline (or Ctrl-C): no test process outlives the check
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise PartTimedOut() from exc
            raise
    summary = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "")
    return {"exit_code": code, "summary": summary.strip("= ")}


# --- float32 losslessness ---------------------------------------------------------------------------------------


def _model(config_class, model_class, device, seed, **options):
    torch.manual_seed(seed)
    config = config_class(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, initializer_range=0.1, **options)
    return model_class(config).eval().to(device)


def _alignment(target_rows: int, draft_rows: int, shared: int):
    from vocabcheck.verdict import Alignment

    return Alignment(target_rows=target_rows, draft_rows=draft_rows, target_input_rows=target_rows,
                     draft_input_rows=draft_rows, rows_source="tensors", shared_ids=shared,
                     shared_ranges=((0, shared),), mapping="pad" if target_rows > draft_rows else "cut",
                     draft_substitute_id=0, renamed_ids=())


def _perturbed(model, rows: int, seed: int):
    """A draft from the target's weights with noise, its vocabulary rows cut or zero-padded to ``rows``."""
    import copy

    config = copy.deepcopy(model.config)
    config.vocab_size = rows
    draft = type(model)(config).eval().to(next(model.parameters()).device)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for (name, mine), theirs in zip(draft.named_parameters(), model.parameters()):
            value = torch.zeros_like(mine)
            common = [slice(0, min(a, b)) for a, b in zip(mine.shape, theirs.shape)]
            value[tuple(common)] = theirs[tuple(common)]
            noise = torch.randn(value.shape, generator=generator).to(value.device)
            mine.copy_(value + 0.05 * theirs.std() * noise)
    return draft


def lossless_checks(device: torch.device, ks: tuple[int, ...] = (1, 4, 8)) -> list[dict]:
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from vocabcheck.decode import DecodeOptions, generate

    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 480, (n,), generator=generator).tolist() for n in (5, 13, 21, 8)]
    prompts[1] = prompts[1][:6] * 2 + [3]
    padded = _model(Qwen2Config, Qwen2ForCausalLM, device, 1, vocab_size=512)
    cut = _model(Qwen2Config, Qwen2ForCausalLM, device, 2, vocab_size=500)
    sliding = _model(MistralConfig, MistralForCausalLM, device, 3, vocab_size=512, sliding_window=8)
    cases = [("padded rows: target 512, draft 500", padded, _perturbed(padded, 500, 4), _alignment(512, 500, 480)),
             ("cut rows: target 500, draft 512", cut, _perturbed(cut, 512, 5), _alignment(500, 512, 480)),
             ("sliding window 8, contexts of 6-8 windows", sliding, _perturbed(sliding, 512, 6),
              _alignment(512, 512, 512))]
    results = []
    for name, target, draft, alignment in cases:
        expected = [_reference(target, p, 40) for p in prompts]
        for method in ("draft", "ngram"):
            for k in ks:
                pair = {"draft": draft, "alignment": alignment} if method == "draft" else {}
                got = generate(target, prompts, DecodeOptions(method=method, k=k, max_new_tokens=40), **pair)
                results.append({"case": name, "method": method, "k": k,
                                "lossless": [s.token_ids for s in got.sequences] == expected,
                                "acceptance_rate": round(got.metrics.acceptance_rate, 3)})
    return results


def _reference(model, prompt, n):
    device = next(model.parameters()).device
    out = model.generate(torch.tensor([prompt], device=device), max_new_tokens=n, do_sample=False,
                         attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=device),
                         eos_token_id=None, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


# --- the Qwen2.5-shaped pair -------------------------------------------------------------------------------------


def qwen_shaped_session(scratch: Path, device: torch.device, *, tiny: bool):
    """A Session over a randomly initialised pair with the real Qwen2.5 tokenizer: configs and tokenizer files on
    disk (so compare profiles them as it would a checkpoint), weights built on the device."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vocabcheck.decode.session import RunRequest, Session
    from vocabcheck.demo import qwen
    from vocabcheck.profile import profile_of
    from vocabcheck.verdict import judge

    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    tokenizer = qwen.cached_tokenizer_json(scratch / "tokenizer")
    models, profiles = [], []
    for name, shape, seed in (("target", TINY_TARGET if tiny else QWEN25_1_5B, 11),
                              ("draft", TINY_DRAFT if tiny else QWEN25_0_5B, 12)):
        config = Qwen2Config(vocab_size=qwen.ROWS_SMALL, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                             num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                             intermediate_size=shape.intermediate, tie_word_embeddings=True,
                             architectures=["Qwen2ForCausalLM"], eos_token_id=qwen.ENDOFTEXT)
        directory = scratch / name
        config.save_pretrained(directory)
        (directory / "tokenizer.json").write_bytes(tokenizer.read_bytes())
        (directory / "tokenizer_config.json").write_text(json.dumps(qwen.tokenizer_config()))
        profiles.append(profile_of(str(directory)))
        torch.manual_seed(seed)
        with torch.device(device):
            models.append(Qwen2ForCausalLM(config).to(dtype).eval())
    comparison = judge(profiles[0], profiles[1])
    return Session(request=RunRequest(target=str(scratch / "target"), draft=str(scratch / "draft")),
                   target_profile=profiles[0], draft_profile=profiles[1], comparison=comparison, device=device,
                   dtype=dtype, target_model=models[0], draft_model=models[1], eos_ids=())


def bf16_match(session, *, tiny: bool) -> dict:
    """Per method, the share of sequences whose speculative greedy output equals plain greedy output in the same
    dtype, and the mean share of tokens before the first difference."""
    from vocabcheck.bench import default_prompts
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt

    ids = session.encode([Prompt(t) for t in default_prompts(4 if tiny else 16)], chat=False)
    tokens = 8 if tiny else 64
    plain = session.generate_ids(ids, DecodeOptions(method="none", max_new_tokens=tokens, ignore_eos=True))
    result = {"dtype": str(session.dtype).removeprefix("torch."), "sequences": len(ids), "tokens": tokens}
    for method in ("ngram", "draft"):
        spec = session.generate_ids(ids, DecodeOptions(method=method, k=4, max_new_tokens=tokens, ignore_eos=True))
        same, prefix = 0, 0.0
        for a, b in zip(spec.sequences, plain.sequences):
            same += a.token_ids == b.token_ids
            agree = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), tokens)
            prefix += agree / tokens
        result[method] = {"identical_sequences": same / len(ids), "mean_prefix_before_difference": prefix / len(ids)}
    return result


def bench(session, out: Path, *, tiny: bool, command: str) -> dict:
    from vocabcheck.bench import BenchPlan, default_prompts, run_bench
    from vocabcheck.decode import DecodeOptions
    from vocabcheck.decode.load.loading import Prompt
    from vocabcheck.render import bench_report

    ids = session.encode([Prompt(t) for t in default_prompts(4 if tiny else 32)], chat=False)
    tokens = 8 if tiny else 64
    plan = BenchPlan(batch_sizes=(1, 4) if tiny else (1, 16), options=DecodeOptions(max_new_tokens=tokens), ks=(4,),
                     warmup=0 if tiny else 1, repeat=1 if tiny else 3, compare_hf=True)
    result = run_bench(session, ids, plan)
    target = "Qwen2.5-1.5B-shaped, random weights" if not tiny else "tiny Qwen2-shaped, random weights"
    draft = "Qwen2.5-0.5B-shaped, random weights" if not tiny else "tiny Qwen2-shaped draft, random weights"
    bench_report.write_report(out / "bench", result, target=target, draft=draft, command=command,
                              machine=json.dumps(machine(session.device)))
    return bench_report.bench_document(result, target=target, draft=draft, command=command)


def markdown(report: dict) -> str:
    from vocabcheck.provenance import current

    lines = ["# GPU check", "", f"- command: `{report['command']}`",
             f"- {current(', '.join(f'{k} {v}' for k, v in report['machine'].items())).line()}",
             f"- wall time: {report['seconds']} s", "", "## Parts", "", "| part | status | seconds | reason |",
             "|---|---|---|---|"]
    lines += [f"| {name} | {p['status']} | {p['seconds']} | {p['reason'] or '—'} |"
              for name, p in report["parts"].items()]
    tests = report["tests"]
    lines += ["", "## gpu-marked tests", "", f"`pytest -m gpu`: {tests['summary']} (exit {tests['exit_code']}); log "
              "in pytest-gpu.log" if tests else "not run (--skip-tests, or see Parts)", ""]
    if report["lossless_float32"] is not None:
        lines += ["## Greedy losslessness in float32 (engine vs transformers' generate of the target alone)", "",
                  "| case | method | k | lossless | acceptance |", "|---|---|---|---|---|"]
        lines += [f"| {c['case']} | {c['method']} | {c['k']} | {'yes' if c['lossless'] else 'NO'} | "
                  f"{c['acceptance_rate']:.1%} |" for c in report["lossless_float32"]]
    match = report["bfloat16_match"]
    if match is not None:
        lines += ["", f"## Speculative vs plain greedy in {match['dtype']} ({match['sequences']} sequences, "
                  f"{match['tokens']} tokens)", "",
                  "| method | identical sequences | mean share before the first difference |", "|---|---|---|"]
        lines += [f"| {m} | {match[m]['identical_sequences']:.0%} | {match[m]['mean_prefix_before_difference']:.0%} |"
                  for m in ("ngram", "draft")]
    if report["bench"] is not None:
        lines += ["", "## Benchmark", "", "See [bench/bench.md](bench/bench.md) (random weights: the draft's "
                  "acceptance is low, so the draft row measures the engine's cost on real shapes, not a trained "
                  "pair's speedup).", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
