"""Fuzz targets for the files a run reads beside the models: kept state (``step-costs.json``, ``head-kernels.json``
in vocabcheck's cache directory) and prompt files (text and JSONL).

Kept state is a hint, never an authority: whatever is at its path — mutated JSON, absurd numbers, a FIFO, a device,
a link out of the cache, a directory, a file too large or nested too deep — a run must go on (the input's outcome is
``ok``; *any* exception, vocabcheck's own error included, is a finding), the costs it prices must be finite and
positive, and what it leaves behind is a regular file vocabcheck wrote or nothing, never a write through a link.

A prompt file ends in its prompts being read and encoded (with the small Qwen2.5 tokenizer and, for some inputs, its
chat template, rendered in the bounded child process ``run`` uses), or in vocabcheck's one-line error naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import fuzz_mutate as fm

MACHINE = "@MACHINE@"  # the worker puts its own machine key here (it depends on the process's torch threads)
COSTS_KEY = "draft; cpu float32; batch 4; k_max 8; target /fuzz/target; draft /fuzz/draft"
HEAD_KEY = "544x32 float32"
ROWS, K_MAX = 4, 8

TARGETS: dict[str, tuple[str, float, int]] = {
    "state-file": ("step-costs.json / head-kernels.json in the cache directory: mutated JSON, absurd costs, "
                   "FIFOs, devices, links out of the cache, directories, oversized and deep files", 20.0, 512 << 20),
    "prompt-file": ("a prompt file (text or JSONL: strings, prompt/messages/response objects): mutated lines, "
                    "special files, caps on bytes, prompts, characters and nesting; encoded, some with the chat "
                    "template", 70.0, 1024 << 20),
}


def costs_state() -> dict[str, Any]:
    """A step-costs entry as a run writes it: fits for the full batch and fewer live rows, and pooled acceptance."""
    from vocabcheck.decode.auto.costs import StepCosts

    costs = StepCosts(0.2, ROWS, K_MAX)
    for live in (ROWS, 2):
        for draft, slots in ((0, 0), (1, 2), (2, 3), (4, 5), (8, 9)):
            costs.observe(draft, slots, 0.004 * live * (1 + 0.15 * draft + 0.05 * slots), live)
    for judged, kept in ((4, 3), (4, 4), (4, 1)):
        costs.observe_acceptance(judged, kept)
    return costs.state()


def state_documents() -> dict[str, dict[str, Any]]:
    return {"step-costs.json": {"version": 1, "machines": {MACHINE: {COSTS_KEY: costs_state()}}},
            "head-kernels.json": {"version": 1, "machines": {MACHINE: {HEAD_KEY: {"1": "onednn", "16": "mkl"}}}}}


ABSURD = (0, -1, 1e-30, 1e30, 1e308, -1e308, 2**70, float("inf"), float("nan"), "1", None, [], {}, True)


def _absurd(chooser: fm.Chooser, document: Any) -> Any:
    """The same document with numbers replaced by values no machine measures (JSON allows Infinity and NaN)."""
    if isinstance(document, dict):
        return {k: _absurd(chooser, v) for k, v in document.items()}
    if isinstance(document, list):
        return [_absurd(chooser, v) for v in document]
    if isinstance(document, (int, float)) and not isinstance(document, bool) and chooser.chance(1, 3):
        return chooser.pick(ABSURD)
    return document


def make_state(chooser: fm.Chooser, scratch: Path, documents: dict[str, dict[str, Any]]) -> tuple[Path, str]:
    """A cache directory ``scratch/cache`` whose state file (one of the two) is hostile; the note names it and
    the way it was made."""
    cache = scratch / "cache"
    cache.mkdir()
    name = chooser.pick(sorted(documents))
    path = cache / name
    outside = scratch / "outside.json"
    outside.write_text('{"untouched": true}\n')
    way = chooser.below(10)
    if way <= 3:
        path.write_bytes(fm.mutate_json_file(chooser, documents[name]))
    elif way <= 5:
        path.write_text(json.dumps(_absurd(chooser, documents[name])))
    elif way == 6:
        os.mkfifo(path)
    elif way == 7:
        path.symlink_to(chooser.pick(("/dev/zero", "/dev/null", "/dev/urandom", str(outside), str(scratch),
                                      "/proc/self/mem", str(cache / "nowhere"))))
    elif way == 8:
        path.mkdir()
    else:
        depth = chooser.pick((40, 1000, 100_000))
        body = chooser.pick((json.dumps(documents[name]), "[" * depth + "]" * depth, " " * (2 << 20) + "{}",
                             '{"version": 1, "machines": {"' + MACHINE + '": {"' + HEAD_KEY + '": {"'
                             + chooser.pick(("²", "9" * 5000, "-1", "1e3", "")) + '": "onednn"}}}}'))
        path.write_text(body)
    return path, f"{name}, way {way}"


def run_state(case) -> None:
    """What a run does with kept state: restore the pair's step costs and price steps with them, read the head's
    kernel choices, then keep new ones. Raises on anything a run must not meet."""
    from vocabcheck.decode.auto.costs import STORE, StepCosts
    from vocabcheck.decode.cpu.head import KernelFile, stored_choices
    from vocabcheck.decode.cpu.measured import MachineStore

    path = Path(case.mutant)
    cache = path.parent
    os.environ["VOCABCHECK_CACHE"] = str(cache)
    if path.is_file() and not path.is_symlink():
        key = json.dumps(MachineStore.machine())[1:-1].encode()
        path.write_bytes(path.read_bytes().replace(MACHINE.encode(), key))
    outside = cache.parent / "outside.json"
    before = outside.read_bytes()
    try:
        costs = StepCosts(0.2, ROWS, K_MAX, COSTS_KEY)
        costs.restore(STORE.get(COSTS_KEY))
        for live in (ROWS, 2, 1):
            price = costs.pricer(live)
            for draft, slots in ((0, 0), (1, 2), (4, 5), (8, 9)):
                seconds = price(draft, slots)
                if not 0 < seconds < float("inf"):
                    raise AssertionError(f"kept state priced a step at {seconds!r} s (live {live}, width {slots})")
        costs.observe(0, 0, 0.01, ROWS)
        costs.save()
        choices = stored_choices((tuple(int(n) for n in HEAD_KEY.split()[0].split("x")), _float32()))
        if not all(isinstance(b, int) and isinstance(k, str) for b, k in choices.items()):
            raise AssertionError(f"kernel choices {choices!r}")
        KernelFile.put(HEAD_KEY, {"1": "mkl"})
    except Exception as exc:  # noqa: BLE001  (kept state must never end a run, not even with vocabcheck's error)
        raise AssertionError(f"kept state {path.name} ended the run: {type(exc).__name__}: {exc}") from exc
    if outside.read_bytes() != before:
        raise AssertionError("a state write went through a link to a file outside the cache")
    for name in ("step-costs.json", "head-kernels.json"):
        kept = cache / name
        if kept.exists() or kept.is_symlink():
            if kept.is_symlink() or not kept.is_file():
                raise AssertionError(f"{name} left as something other than a regular file")
            json.loads(kept.read_text(encoding="utf-8"))


def _float32():
    import torch

    return torch.float32


# --- prompt files -----------------------------------------------------------------------------------------------

def prompt_lines(prompts_jsonl: Path) -> list[Any]:
    """JSONL values as users write them: the benchmark's strings, and prompt / messages / response objects."""
    strings = [json.loads(line) for line in prompts_jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [*strings[:6], {"prompt": strings[0], "response": strings[1]}, {"text": "Say hi."},
            {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": strings[2]}]},
            {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"},
                          {"role": "user", "content": "Again"}], "response": "Hi again."}]


def make_prompts(chooser: fm.Chooser, scratch: Path, lines: list[Any]) -> tuple[Path, str]:
    jsonl = chooser.chance(2, 3)
    path = scratch / ("prompts.jsonl" if jsonl else chooser.pick(("prompts.txt", "prompts", "prompts.json")))
    chosen = [chooser.pick(lines) for _ in range(1 + chooser.below(6))]
    way = chooser.below(12)
    if jsonl and way <= 4:
        values = [fm.mutate_document(chooser, value) if chooser.chance(1, 2) else value for value in chosen]
        body = "\n".join(fm.dumps(chooser, value).replace("\n", " ") for value in values)
        path.write_bytes(fm.text_bytes(body))
    elif way <= 6:
        text = "\n".join(json.dumps(v) if jsonl else (v if isinstance(v, str) else json.dumps(v)) for v in chosen)
        path.write_bytes(fm.mutate_text(chooser, text.encode("utf-8")))
    elif way == 7:
        os.mkfifo(path)
    elif way == 8:
        path.symlink_to(chooser.pick(("/dev/zero", "/dev/null", str(scratch), "/proc/self/mem")))
    elif way == 9:  # past a cap: characters in one prompt, prompts in a file, or nesting
        body = chooser.pick(('"' + "a" * ((1 << 20) + 1) + '"', "a" * ((1 << 20) + 1), "\"x\"\n" * 100_001,
                             "[" * 100_000 + "]" * 100_000, '{"prompt": ' + "[" * 33 + "]" * 33 + "}",
                             '"\\udc80"', '{"messages": [{"role": "user", "content": "\\ud800"}]}'))
        path.write_text(body, encoding="utf-8")
    elif way == 10:
        path.write_bytes(chooser.pick((b"", b"\n\n\r\n", b"\xff\xfe\x00", "\u2028\u0085x".encode(), b"\x00" * 64)))
    else:
        path.write_text("\n".join(json.dumps(v) for v in chosen) if jsonl else "\n".join(
            v for v in chosen if isinstance(v, str)) or "x", encoding="utf-8")
    how = "auto" if path.suffix in (".jsonl", ".txt") and chooser.chance(1, 2) else "jsonl" if jsonl else "text"
    return path, f"format={how}{' chat' if chooser.chance(1, 4) else ''}, way {way}"


_PROFILE: dict[str, Any] = {}


def run_prompts(case) -> None:
    """Read the prompt file as ``run`` does, and encode its prompts with the small model's tokenizer (and chat
    template)."""
    from vocabcheck.decode.load.loading import encode_prompts, read_prompt_file
    from vocabcheck.profile import profile_of

    if case.reference not in _PROFILE:
        _PROFILE[case.reference] = profile_of(case.reference)
    profile = _PROFILE[case.reference]
    how = case.note.split(",")[0]
    prompt_format = how.split()[0].removeprefix("format=")
    prompts = read_prompt_file(Path(case.mutant), None if prompt_format == "auto" else prompt_format)
    encoded = encode_prompts(profile, prompts[:64], chat=how.endswith(" chat"))
    if not all(ids and all(isinstance(i, int) for i in ids) for ids in encoded):
        raise AssertionError("a prompt encoded to no tokens without an error")
