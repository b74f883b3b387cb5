"""`vocabcheck demo`: the whole story on an embedded Qwen2.5-shaped pair, offline."""

from __future__ import annotations

import typer

from .app import app


@app.command()
def demo(
    rebuild: bool = typer.Option(False, "--rebuild", help="Rebuild the demo pair even if it is cached."),
) -> None:
    """Build (once, offline, into the user cache) a Qwen2.5-shaped pair and compare it."""
    from ..demo.story import tell

    tell(rebuild=rebuild)
