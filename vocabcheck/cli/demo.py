"""`vocabcheck demo`: the whole story on an embedded Qwen2.5-shaped pair, offline."""

from __future__ import annotations

import typer


def demo(
    rebuild: bool = typer.Option(False, "--rebuild", help="Rebuild the demo pair even if it is cached."),
    no_bench: bool = typer.Option(False, "--no-bench", help="Skip the short benchmark at the end."),
) -> None:
    """Build (once, offline, into the user cache) a Qwen2.5-shaped pair, then compare, run and bench it."""
    from .demo_story import tell

    tell(rebuild=rebuild, bench=not no_bench)
