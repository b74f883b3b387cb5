"""The long fuzz run over vocabcheck's loaders; its figures go to reports/fuzz.md.

Inputs are structure-aware mutations of the real fixtures (tests/support/fuzz_mutate.py,
tests/support/fuzz_targets.py): tokenizer.json (a small tokenizer cut from Qwen2.5, and the full 151,665-token file),
the JSON files of a model directory, the slow-tokenizer files transformers converts, safetensors headers, sharded
index files with hostile shard names and symlinks, PyTorch zip checkpoints, and GGUF files. Each input runs in a
worker process (tests/support/fuzz_worker.py) through ``vocabcheck.compare`` and every report renderer. The property:
every input ends in success or the project's own error (a ``VocabcheckError`` with exit code 2 that names the file)
within the target's time bound and memory bound; anything else (another exception, a hang, a worker that dies,
memory over the bound) is a crash, saved with its input under ``--work``/crashes and reproducible with
``--replay TARGET:SEED``.

    python -m benchmarks.fuzz                              # the default long run (104,000 inputs, ~50 min)
    python -m benchmarks.fuzz --scale 0.01 --no-report     # a quick smoke run
    python -m benchmarks.fuzz --replay configs:123         # rerun one input and print its outcome
    python -m benchmarks.fuzz --atheris tokenizer-small --runs 20000   # coverage-guided (atheris), one target

Inputs are ``(target, seed)``: a seeded ``random.Random`` drives the mutators, so a run is reproducible. The fixtures
are the test suite's (``.pytest_cache/d/vocabcheck-fixtures-N``), built here when missing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from tests.support import fuzz_mutate as fm
from tests.support.fuzz_targets import TARGETS, Materials
from tests.support.fuzz_worker import Worker
from vocabcheck.provenance import current

ROOT = Path(__file__).resolve().parent.parent

# inputs per target in the default run (--scale multiplies them)
DEFAULT_COUNTS = {
    "tokenizer-small": 30_000,
    "configs": 20_000,
    "safetensors": 16_000,
    "index": 12_000,
    "pytorch-bin": 8_000,
    "gguf-small": 10_000,
    "tiktoken-small": 3_000,
    "slow-tokenizer": 4_000,
    "tokenizer-full": 600,
    "gguf-full": 400,
    "tokenizer-pipeline": 8_000,
    "state-file": 30_000,
    "prompt-file": 12_000,
}

# Crashes found while the fuzz suite was built, and where each was fixed; kept here so that the report lists them.
# (input, root cause, fix, regression test); "fuzzer" or "review" says who found it.
FIXED: list[tuple[str, str, str, str]] = [
    ("fuzzer: tokenizer.json / config.json with a 5,000-digit number",
     "`json.loads` raises plain ValueError (Python's 4,300-digit limit), not JSONDecodeError: exit 3",
     "`sources/base.parse_json` turns it into InputError; the profile parses tokenizer.json through it",
     "test_fuzz::test_a_number_of_5000_digits_in_tokenizer_json_is_bad_input, ..._in_config_json_..."),
    ("fuzzer: tokenizer.json whose `model.type` is an object", "`model_type not in MODEL_DEFAULTS`: TypeError "
     "(unhashable)", "`profile.profile_tokenizer` checks the type is a string",
     "test_fuzz::test_a_model_type_that_is_not_a_string_is_bad_input"),
    ("fuzzer: safetensors header nested 100,000 deep", "huggingface_hub's header parser lets RecursionError "
     "through", "`checkpoint.safetensors_shapes` parses and validates the header itself (parse_json)",
     "test_fuzz::test_a_safetensors_header_nested_too_deeply_is_bad_input"),
    ("fuzzer: index naming a 300-character shard", "`Path.is_file()` raises OSError (ENAMETOOLONG)",
     "`checkpoint._index_files` turns it into InputError naming the index",
     "test_fuzz::test_an_index_naming_a_shard_too_long_for_the_file_system_is_bad_input"),
    ("fuzzer: damaged data.pkl in pytorch_model.bin", "torch's weights-only unpickler raises IndexError/KeyError",
     "`checkpoint.pickle_shapes` reads the pickle as opcodes first and maps every torch failure to InputError",
     "test_fuzz::test_a_damaged_pytorch_pickle_is_bad_input"),
    ("fuzzer (hang): data.pkl with a 600 KB global name", "torch.load formats its refusal with regular expressions "
     "quadratic in the longest non-blank run: hours", "`checkpoint._check_pickle` refuses strings over 1,024 "
     "non-blank characters before torch.load", "test_security::test_a_pickle_that_makes_torch_error_reporting_hang_"
     "is_refused_at_once"),
    ("fuzzer: config.json field of the wrong type beside vocab.json + merges.txt", "transformers' strict config "
     "raises StrictDataclassFieldValidationError out of AutoTokenizer", "`convert.from_transformers` maps every "
     "library failure to InputError", "test_fuzz::test_a_config_transformers_rejects_is_bad_input_for_conversion"),
    ("fuzzer: empty or broken vocab.json", "tokenizers raises a bare Exception", "same",
     "test_fuzz::test_slow_tokenizer_files_the_tokenizers_library_rejects_are_bad_input"),
    ("fuzzer: vocab.json giving a token a string id", "Rust panic: PyO3's PanicException derives from "
     "BaseException (missed by `except Exception`), and Rust prints its report on descriptor 2",
     "`errors.library_failure` + `errors.panic_output_dropped` at every tokenizers call on user files",
     "test_fuzz::test_slow_tokenizer_files_that_make_the_library_panic_are_bad_input"),
    ("fuzzer (worker died): vocab.json with id 2,147,483,647", "tokenizers' `to_str()` writes every id up to the "
     "largest: 8 GiB, abort", "`convert._serialise` refuses a vocabulary sparse beyond reason first",
     "test_fuzz::test_a_sparse_vocab_json_is_refused_before_the_library_writes_every_id"),
    ("fuzzer: tokenizer.json with a continuing_subword_prefix longer than merge parts", "Rust panic in "
     "`Tokenizer.from_str` during compare's probe: exit 1 with a traceback", "`ModelSource.tokenizer` catches "
     "panics; `cli.app.main` reports any escaped panic as a bug (exit 3)",
     "test_fuzz::test_a_tokenizer_json_the_library_panics_on_is_bad_input, test_interrupts::test_a_rust_panic_is_a_"
     "bug_too"),
    ("fuzzer: tokenizer.json whose unk_token is not in its vocab", "loads, then the probe's encode_batch raises: "
     "exit 3", "`ModelSource.tokenizer` encodes and decodes the probe corpus when it loads",
     "test_fuzz::test_a_tokenizer_that_loads_but_cannot_encode_is_bad_input"),
    ("review: pre-tokenizer regex `(a\\|aa)+$`", "the regex engine's retry limit panics in encode", "same",
     "test_fuzz::test_a_pre_tokenizer_regex_that_backtracks_forever_is_bad_input"),
    ("fuzzer: GGUF merges naming tokens not in the list", "tokenizers' bare Exception out of transformers' GGUF "
     "builder", "`convert.from_gguf_metadata` maps every library failure to InputError",
     "test_fuzz::test_a_gguf_whose_merges_name_unknown_tokens_is_bad_input"),
    ("fuzzer: config says tied beside a checkpoint with only lm_head", "embedding rows None: diff.py crashes "
     "formatting them", "`profile._embeddings`: tied only when there is an input embedding (the tensors win)",
     "test_fuzz::test_a_lone_lm_head_beside_a_tied_config_reads_its_rows"),
    ("review: safetensors shape of 200,000 dimensions of 2^64", "huggingface_hub multiplies every shape out: "
     "minutes", "`safetensors_shapes` checks shape x dtype width == the offsets' span, with a bounded product",
     "test_fuzz::test_a_safetensors_shape_of_huge_dimensions_is_refused_at_once, ..._cannot_claim_rows_..."),
    ("review: Unigram score 10^400", "`float()` raises OverflowError", "`profile_tokenizer` checks the range",
     "test_fuzz::test_a_unigram_score_no_float_holds_is_bad_input"),
    ("review: \\udc80 escape in tokenizer.json or config.json", "an unpaired surrogate reaches the report: "
     "UnicodeEncodeError when it is printed or written", "`parse_json` refuses strings that are not Unicode text",
     "test_fuzz::test_an_unpaired_surrogate_is_refused_where_it_is_read"),
    ("review: tiktoken ranks -1, 2^32, 4e9, duplicated, or a 100 KB token", "OverflowError in the BPE constructor; "
     "to_str() over 4 billion ids; merge derivation quadratic in token length", "`convert.read_tiktoken_ranks` "
     "validates ranks, sparsity and token lengths", "test_fuzz::test_tiktoken_ranks_that_lie_are_bad_input"),
    ("security test (hang): a FIFO named model.safetensors", "`glob('*.safetensors')` then open(): blocks forever",
     "regular files only in `find_checkpoint`; `safetensors_shapes` and `read_capped` refuse other file types",
     "test_security::test_fifos_where_files_are_expected_never_block"),
    ("review (hang): FIFO or /dev/zero as merges.txt / tokenizer_config.json", "transformers opens every file it "
     "knows", "`convert.from_transformers` converts a staged copy of the regular files (no code, no weights)",
     "test_security::test_slow_tokenizer_files_that_are_not_regular_files_are_refused"),
    ("fuzzer (first long run): a pair whose first differing probe text is '... [INST] [/INST] ...'",
     "render/terminal.py handed finding messages to rich as markup: MarkupError, exit 3 on valid pairs",
     "commit c337d47 (render/terminal.py, not this suite's files): the terminal console reads no markup",
     "test_fuzz::test_a_finding_that_quotes_text_with_brackets_prints"),
    ("security test: any tokenizer.json read", "`read_capped` asked for limit + 1 bytes: a 256 MB allocation for a "
     "5 MB file", "read the size stat saw, plus one byte", "test_security::test_json_files_over_their_cap_are_"
     "refused_without_being_read (tracemalloc peak)"),
    ("fuzzer (tokenizer-pipeline, issue #23): a decoder of chained Replace 'a' → 'abab…' steps, or of 10,002 "
     "BPEDecoders with an empty suffix", "the tokenizers library's decode of the probe's smoke texts grows each token "
     "exponentially (3 GB, SIGABRT; 20 GB, killed)", "`limits.check_pipeline_growth` bounds the normalizer's and the "
     "decoder's growth from their steps before the library loads the file", "test_hostile_round3::test_row2_steps_"
     "whose_growth_compounds_are_refused_from_the_steps_alone"),
]


# Crashes found and still open in files this harness's owner may not change, by exception type, with where the fix
# belongs; --atheris counts them and goes on, and the report names them. Empty: none is open.
KNOWN_OPEN: dict[str, str] = {}


def fixtures(root: Path) -> dict[str, Path]:
    """The real fixtures the mutations start from, built as the test suite builds them when missing."""
    from tests.support.fixtures import FIXTURE_VERSION, ModelFactory
    from vocabcheck.demo import qwen

    base = root / ".pytest_cache" / "d" / f"vocabcheck-fixtures-{FIXTURE_VERSION}"
    qwen_json = qwen.cached_tokenizer_json(base / "tokenizers")
    target, draft = ModelFactory(base / "models", qwen_json).qwen_pair()
    return {"qwen_json": qwen_json, "target_dir": target, "draft_dir": draft}


def signature(outcome) -> str:
    """Crashes with one cause share a signature: the kind, the exception and the innermost vocabcheck frame."""
    frame = ""
    for line in outcome.traceback.splitlines():
        if "/vocabcheck/" in line and line.strip().startswith("File"):
            frame = line.strip()
    return f"{outcome.kind}: {outcome.error} {frame}".strip()


class Run:
    def __init__(self, work: Path, materials: Materials):
        self.work = work
        self.materials = materials
        self.scratch = work / "scratch"
        self.crash_dir = work / "crashes"
        self.worker = Worker(work / "worker.log")
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.seconds: dict[str, float] = defaultdict(float)
        self.slowest: dict[str, float] = defaultdict(float)
        self.peak: dict[str, int] = defaultdict(int)
        self.crashes: dict[str, list[dict]] = defaultdict(list)

    def one(self, target: str, seed: int, chooser: fm.Chooser | None = None, *, keep: bool = True):
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        try:
            case = self.materials.make(target, chooser or fm.RandomChooser(seed), self.scratch)
        except RecursionError:  # the mutator itself gave up on a document nested too deeply to copy
            self.counts[target]["skipped"] += 1
            return None, None
        _, limit, memory = TARGETS[target]
        outcome = self.worker.run(case, limit, memory)
        self.counts[target][outcome.kind] += 1
        self.seconds[target] += outcome.seconds
        self.slowest[target] = max(self.slowest[target], outcome.seconds)
        self.peak[target] = max(self.peak[target], outcome.peak_bytes)
        if outcome.kind not in ("ok", "error"):
            key = signature(outcome)
            found = self.crashes[key]
            if keep and len(found) < 3:
                saved = self.crash_dir / f"{target}-{seed}"
                shutil.rmtree(saved, ignore_errors=True)
                shutil.copytree(self.scratch, saved, symlinks=True)
            found.append({"target": target, "seed": seed, "note": case.note, "swap": case.swap, **asdict(outcome)})
        return case, outcome

    def close(self) -> None:
        self.worker.close()


KEPT = "<!-- sections below are kept when benchmarks/fuzz.py rewrites this report -->"


def schedule(counts: dict[str, int]) -> list[tuple[str, int]]:
    """Targets interleaved in proportion to their counts, so that a run stopped early has covered all of them."""
    order = []
    progress = {t: 0 for t in counts}
    total = sum(counts.values())
    for step in range(total):
        target = min((t for t in counts if progress[t] < counts[t]), key=lambda t: (progress[t] + 1) / counts[t])
        order.append((target, progress[target]))
        progress[target] += 1
    return order


def write_report(path: Path, run: Run, *, command: str, elapsed: float, seed: int) -> None:
    total = sum(sum(v for k, v in c.items() if k != "skipped") for c in run.counts.values())
    lines = [
        "# Fuzzing the loaders",
        "",
        "Structure-aware mutations of the real fixtures (Qwen2.5 tokenizer.json rebuilt from `qwen.tiktoken`, the",
        "Qwen2.5-shaped `qwen_pair` model directories, GGUF files written as llama.cpp writes them), each run in a",
        "worker process through `vocabcheck.compare` and every report renderer (JSON validated against its schema,",
        "Markdown, terminal). Property: success or the project's own error (`VocabcheckError`, exit code 2, naming the",
        "file) within the time bound and the memory bound of the target; anything else is a crash. How it works:",
        "[docs/hostile-input.md](../docs/hostile-input.md).",
        "",
        "```sh",
        command,
        "```",
        "",
        f"{current().line().replace('measured', 'Measured', 1)}. "
        f"Seeds {seed}..; {total:,} inputs in {elapsed / 60:,.1f} minutes "
        f"({total / max(elapsed, 1e-9):,.1f} inputs/s); worker restarts: {run.worker.restarts}.",
        "",
        "| target | what is mutated | inputs | success | own error | crashes | slowest input (bound) | "
        "peak memory added (bound) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for target, (what, limit, memory) in TARGETS.items():
        counts = run.counts.get(target)
        if not counts:
            continue
        crashes = sum(v for k, v in counts.items() if k not in ("ok", "error", "skipped"))
        tried = sum(v for k, v in counts.items() if k != "skipped")
        lines.append(f"| `{target}` | {what} | {tried:,} | {counts['ok']:,} | {counts['error']:,} | "
                     f"{crashes:,} | {run.slowest[target]:.2f} s ({limit:.0f} s) | "
                     f"{run.peak[target] / 2**20:,.0f} MiB ({memory / 2**20:,.0f} MiB) |")
    lines += ["", "## Crashes open after this run", ""]
    if run.crashes:
        for key, found in run.crashes.items():
            first = found[0]
            known = KNOWN_OPEN.get(first["error"])
            lines.append(f"- {len(found)}× `{key}` — first: `--replay {first['target']}:{first['seed']}`: "
                         f"{first['message'][:300]}" + (f" (known: {known})" if known else ""))
    else:
        lines.append("None.")
    lines += ["", "## Crashes found and fixed", "",
              "Found while this suite was built — by the fuzzer, by the security tests, or in review (the first "
              "column says which); each has a regression test, and its fix is in the loader that should have "
              "validated.", "",
              "| input | root cause | fix | regression test |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in FIXED]
    if path.is_file() and KEPT in path.read_text(encoding="utf-8"):  # hand-written sections (other runs) stay
        lines += ["", KEPT + path.read_text(encoding="utf-8").split(KEPT, 1)[1].rstrip("\n")]
    path.parent.mkdir(parents=True, exist_ok=True)
    from vocabcheck import atomic

    atomic.write_text(path, "\n".join(lines) + "\n")


def atheris_main(materials: Materials, work: Path, target: str, runs: int) -> int:
    """Coverage-guided: libFuzzer chooses the bytes that drive the mutators, and keeps inputs that reach new code in
    vocabcheck. The target runs in this process (instrumented); libFuzzer's -timeout and -rss_limit_mb are the time and
    memory bounds, and any exception other than vocabcheck's own error is a crash it saves under ``work``."""
    import atheris

    import vocabcheck.diff, vocabcheck.probe, vocabcheck.profile, vocabcheck.verdict  # noqa: E401,F401
    import vocabcheck.render.data, vocabcheck.render.markdown, vocabcheck.render.terminal  # noqa: E401,F401
    import vocabcheck.sources.checkpoint, vocabcheck.sources.convert, vocabcheck.sources.gguf  # noqa: E401,F401
    import vocabcheck.sources.local, vocabcheck.sources.raw  # noqa: E401,F401
    from tests.support import fuzz_targets
    from vocabcheck.errors import VocabcheckError

    _, limit, memory = TARGETS[target]
    scratch = work / "atheris-scratch"
    counter = iter(range(10**12))

    def one_input(data: bytes) -> None:
        number = next(counter)
        if number % 1000 == 999:
            print(f"[atheris] {number + 1:,} inputs; known open crashes met (counted, not stopped at): {dict(known)}",
                  flush=True)
        directory = scratch / str(number % 2)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        try:
            case = materials.make(target, fm.AtherisChooser(atheris.FuzzedDataProvider(data), data), directory)
        except RecursionError:
            return
        try:
            fuzz_targets.run_case(case)
        except VocabcheckError as exc:
            if exc.exit_code != 2 or not exc.where:
                raise
        except Exception as exc:
            if type(exc).__name__ not in KNOWN_OPEN:
                raise
            known[type(exc).__name__] += 1  # counted and reported, so that the run goes on past it

    known: Counter = Counter()
    atheris.instrument_all()
    crashes = work / "atheris-crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    atheris.Setup([sys.argv[0], f"-runs={runs}", f"-timeout={int(limit)}", f"-rss_limit_mb={memory // 2**20 + 2048}",
                   f"-artifact_prefix={crashes}/", "-print_final_stats=1", "-max_len=512"], one_input)
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the default input counts")
    parser.add_argument("--targets", default=",".join(DEFAULT_COUNTS), help="comma-separated targets")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long (the report says so)")
    parser.add_argument("--work", type=Path, default=ROOT / ".pytest_cache" / "d" / "vocabcheck-fuzz",
                        help="scratch, crash inputs, results (git-ignored by default)")
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "fuzz.md")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--replay", default=None, help="TARGET:SEED: run one input, print its outcome")
    parser.add_argument("--replay-crashes", type=Path, default=None, metavar="RESULTS_JSON",
                        help="rerun every crashing input of an earlier run (its --work results.json)")
    parser.add_argument("--atheris", default=None, metavar="TARGET", help="coverage-guided run of one target")
    parser.add_argument("--runs", type=int, default=10_000, help="inputs for --atheris")
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    materials = Materials(args.work / "materials", **fixtures(ROOT))
    run = Run(args.work, materials)
    try:
        if args.replay:
            target, seed = args.replay.rsplit(":", 1)
            case, outcome = run.one(target, int(seed), keep=False)
            print(json.dumps({"case": asdict(case), "outcome": asdict(outcome)}, indent=2))
            print(f"the input is in {run.scratch}")
            return 0 if outcome.kind in ("ok", "error") else 1
        if args.replay_crashes:
            earlier = json.loads(args.replay_crashes.read_text())["crashes"]
            still = 0
            for key, found in earlier.items():
                outcomes = [run.one(item["target"], item["seed"], keep=False)[1] for item in found]
                bad = [o for o in outcomes if o is not None and o.kind not in ("ok", "error")]
                still += len(bad)
                print(f"{key}: {len(found)} input(s) replayed, {len(bad)} still crash"
                      + (f" ({bad[0].error}: {bad[0].message[:200]})" if bad else ""))
            return 1 if still else 0
        if args.atheris:
            return atheris_main(materials, args.work, args.atheris, args.runs)
        chosen = [t.strip() for t in args.targets.split(",") if t.strip()]
        unknown = [t for t in chosen if t not in TARGETS]
        if unknown:
            parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
        counts = {t: max(1, round(DEFAULT_COUNTS.get(t, 1000) * args.scale)) for t in chosen}
        deadline = started + args.minutes * 60 if args.minutes else None
        last = time.perf_counter()
        order = schedule(counts)
        for number, (target, index) in enumerate(order, start=1):
            if deadline and time.perf_counter() > deadline:
                break
            _, outcome = run.one(target, args.seed + index)
            if outcome is not None and outcome.kind not in ("ok", "error"):
                print(f"CRASH {target}:{args.seed + index} {outcome.kind} {outcome.error}: "
                      f"{outcome.message[:200]}", flush=True)
            if time.perf_counter() - last > 60 or number == len(order):
                last = time.perf_counter()
                done = {t: sum(c.values()) for t, c in run.counts.items()}
                print(f"[{(last - started) / 60:.1f} min] {number:,}/{len(order):,} {done} "
                      f"crash signatures: {len(run.crashes)}", flush=True)
        elapsed = time.perf_counter() - started
        (args.work / "results.json").write_text(json.dumps({
            "counts": {t: dict(c) for t, c in run.counts.items()}, "seconds": run.seconds, "slowest": run.slowest,
            "peak_bytes": run.peak, "elapsed": elapsed, "crashes": run.crashes}, indent=2, default=str))
        if not args.no_report:
            command = "python -m benchmarks.fuzz " + " ".join(shlex.quote(a) for a in sys.argv[1:])
            write_report(args.report, run, command=command.strip(), elapsed=elapsed, seed=args.seed)
        print(f"{sum(sum(c.values()) for c in run.counts.values()):,} inputs in {elapsed / 60:.1f} min; "
              f"{len(run.crashes)} crash signature(s)")
        for key, found in run.crashes.items():
            print(f"  {len(found)}× {key}: --replay {found[0]['target']}:{found[0]['seed']}")
        return 1 if run.crashes else 0
    finally:
        run.close()


if __name__ == "__main__":
    sys.exit(main())
