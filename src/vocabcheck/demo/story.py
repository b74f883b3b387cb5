"""`vocabcheck demo`: what engines conclude from config.vocab_size, and what is true."""

from __future__ import annotations

import json

from rich.text import Text

from ..render import terminal
from .pair import demo_pair


def tell(rebuild: bool = False) -> None:
    from .. import compare

    out = terminal.console()
    with out.status("building the demo pair") as status:
        pair = demo_pair(rebuild=rebuild, progress=lambda message: status.update(message))
    out.print(Text("Demo pair ", style="bold") + Text(
        f"{'built' if pair.built else 'cached'} in {pair.target.parent}: the real Qwen2.5 tokenizer with a "
        "Qwen2.5-7B-shaped target and a Qwen2.5-0.5B-shaped draft, both tiny and seeded"))
    target_vocab = json.loads((pair.target / "config.json").read_text())["vocab_size"]
    draft_vocab = json.loads((pair.draft / "config.json").read_text())["vocab_size"]
    out.rule("What engines conclude from config.vocab_size")
    if target_vocab != draft_vocab:
        out.print(f"target vocab_size {target_vocab:,} ≠ draft vocab_size {draft_vocab:,}: vLLM raises \"Target and "
                  "draft model should have the same vocabulary size\"; the pair is refused.")
    else:
        out.print(f"vocab_size {target_vocab:,} on both sides: engines accept the pair.")
    out.rule("What is true: vocabcheck compare")
    comparison = compare(str(pair.target), str(pair.draft))
    terminal.print_comparison(out, comparison)
    out.print(Text("Try it yourself: ", style="bold")
              + Text(f"vocabcheck compare {pair.target} {pair.draft}"))
