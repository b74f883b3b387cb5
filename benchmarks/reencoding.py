"""How the translated draft's re-encoding picks a draft token for a byte string, measured by acceptance: a draft
that is the target's own network re-indexed for another tokenizer should accept almost everything, so every
proposal it loses is a context it was fed differently from the target's.

Two Mistral SentencePiece tokenizers (from `mistral-common`), v1 (32,000 ids) and v3 (the same strings after 768
control tokens), tiny seeded Qwen2 networks (hidden 48, the shape tests/test_translate_decode.py uses), both
directions. Each pair runs the same prompts greedily twice in one process, side by side: with the re-encoding rule
of before (the lowest id for a byte string, so `.` became `<0x2E>` and `fox` `▁fo <0x78>`) and with the current one
(ordinary tokens before byte tokens, a shared token's one-to-one counterpart first). Output is checked equal to the
target alone in both.

    python -m benchmarks.reencoding             # builds the models once under $VOCABCHECK_CACHE or ~/.cache
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PROMPTS = ["The quick brown fox jumps over the lazy dog.", "def fibonacci(n):\n    return",
           "Speculative decoding lets a small model propose tokens; a large one verifies them.",
           "Größe, naïve café — 日本語 🤖 done", "Q: What is 2 + 2?\nA:", "fox, fix, fax. Fox! (box)",
           "x = [i ** 2 for i in range(10)]  # squares", "Dear Sir/Madam,\n\nThank you for your e-mail (No. 42)."]
MISTRAL_CONFIG = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}
MISTRAL_GENERATION = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}


def cache() -> Path:
    root = Path(os.environ.get("VOCABCHECK_CACHE", Path.home() / ".cache" / "vocabcheck")) / "reencoding-v1"
    root.mkdir(parents=True, exist_ok=True)
    return root


def tokenizer_json(version: str) -> Path:
    from tests.support.fixtures import MISTRAL_SPM, mistral_data
    from vocabcheck import atomic
    from vocabcheck.sources.convert import from_sentencepiece

    path = cache() / f"mistral-{version}.json"
    if not path.is_file():
        atomic.write_text(path, from_sentencepiece(mistral_data() / MISTRAL_SPM[version]))
    return path


def model(version: str, rows: int, seed: int, state_dict=None, name: str | None = None) -> Path:
    from vocabcheck.demo.checkpoint import ModelShape, write_model

    directory = cache() / (name or f"mistral-{version}-{rows}-seed{seed}")
    if not directory.is_dir():
        write_model(directory, ModelShape(rows=rows, hidden=48, tied=True, seed=seed),
                    tokenizer_json=tokenizer_json(version), tokenizer_config=MISTRAL_CONFIG,
                    generation_config=MISTRAL_GENERATION, state_dict=state_dict)
    return directory


def reindexed(target: Path, source: str, destination: str, rows: int) -> Path:
    """The target's network with every row moved from its ``source``-tokenizer id to the string's
    ``destination``-tokenizer id (strings only one side has: zero rows)."""
    import torch
    from transformers import AutoModelForCausalLM

    name = f"{target.name}-reindexed-for-{destination}"
    if (cache() / name).is_dir():
        return cache() / name
    ids = [json.loads(tokenizer_json(v).read_text(encoding="utf-8"))["model"]["vocab"] for v in (source, destination)]
    common = [(i, ids[1][token]) for token, i in ids[0].items() if token in ids[1] and ids[1][token] < rows]
    state = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).state_dict()
    moved = {}
    for key, value in state.items():
        if key in ("model.embed_tokens.weight", "lm_head.weight"):
            grown = torch.zeros(rows, value.shape[1])
            grown[torch.tensor([j for _, j in common])] = value[torch.tensor([i for i, _ in common])]
            value = grown
        moved[key] = value.clone()
    return model(destination, rows, 0, moved, name=name)


def rules():
    """The re-encodings compared: of before (the lowest id for a byte string, so `.` became `<0x2E>`; a fragment the
    draft's SentencePiece tokenizer prefixes with a space split greedily), with ordinary tokens first only, and now
    (also the draft's own tokenization of a fragment, cut after a line break). The per-row feeding (a shared target
    token always fed as its counterpart) is the current one in all three."""
    from vocabcheck.decode.translate import Translator

    class OrdinaryFirst(Translator):
        def encode(self, text: str) -> list[int]:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            return ids if self._bytes(ids) == text.encode("utf-8") else self.split(text.encode("utf-8"))

    class Before(OrdinaryFirst):
        def __init__(self, *args):
            super().__init__(*args)
            self.by_bytes = {}
            for draft_id, value in enumerate(self.draft_table):
                if value and value not in self.by_bytes:
                    self.by_bytes[value] = draft_id

    return {"before: lowest id": Before, "ordinary tokens first": OrdinaryFirst, "now: + own tokenization": Translator}


def measure(target_path: Path, draft_path: Path) -> dict[str, tuple[float, float, bool]]:
    import torch
    from transformers import AutoModelForCausalLM

    from vocabcheck import compare
    from vocabcheck.decode import DecodeOptions, generate

    comparison = compare(str(target_path), str(draft_path))
    target, draft = (AutoModelForCausalLM.from_pretrained(str(p), dtype=torch.float32).eval()
                     for p in (target_path, draft_path))
    tokenizer = comparison.target.source.tokenizer
    prompts = [tokenizer.encode(text).ids for text in PROMPTS]
    options = DecodeOptions(k=4, max_new_tokens=32)
    alone = [s.token_ids for s in generate(target, prompts, DecodeOptions(method="none", max_new_tokens=32)).sequences]
    results = {}
    for rule, kind in rules().items():
        translator = kind(comparison.translation, comparison.draft.source.tokenizer, comparison.target.tokenizer.tokens)
        result = generate(target, prompts, options, draft=draft, translator=translator)
        same = [s.token_ids for s in result.sequences] == alone
        results[rule] = (result.metrics.acceptance_rate, result.metrics.mean_accepted_length, same)
    return results


def main() -> int:
    v1 = model("v1", 32000, 31)
    v3 = model("v3", 32768, 32)
    pairs = {"v3 target <- v3's network re-indexed for v1": (v3, reindexed(v3, "v3", "v1", 32000)),
             "v1 target <- v1's network re-indexed for v3": (v1, reindexed(v1, "v1", "v3", 32768))}
    print(f"{len(PROMPTS)} prompts, greedy, k = 4, 32 new tokens; acceptance rate / mean accepted length")
    ok = True
    for label, (target, draft) in pairs.items():
        for rule, (rate, length, same) in measure(target, draft).items():
            ok = ok and same
            print(f"{label:46}  {rule:26}  {rate:6.1%}  {length:5.2f}  output {'= target' if same else 'DIFFERS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
