"""Model paths as the terminal views show them: a path too long for its cell keeps its distinctive tail
(``…/demo-v5/qwen2.5-shaped-draft``, not ``/root/.cache/voc…``), whole path components first. Only the terminal
views shorten; the JSON documents, Markdown reports and command lines to copy keep every path whole."""

from __future__ import annotations

from collections.abc import Sequence

ELLIPSIS = "…"
LIMIT = 36  # characters: a model's name in a table cell or a heading at 80 columns


def short_path(text: str, limit: int = LIMIT) -> str:
    """``text`` if it holds in ``limit`` characters; else ``…/`` and as many of its last path components as fit
    (at least the last one, cut at its start where that alone is too long)."""
    text = str(text)
    if len(text) <= limit:
        return text
    parts = text.rstrip("/").split("/")
    tail = parts.pop()
    if len(tail) + 2 > limit:
        return ELLIPSIS + tail[-max(limit - 1, 1):]
    while parts and len(parts[-1]) + len(tail) + 3 <= limit:
        tail = f"{parts.pop()}/{tail}"
    return f"{ELLIPSIS}/{tail}" if parts or text.startswith("/") else tail


def short_paths(texts: Sequence[str], limit: int = LIMIT) -> list[str]:
    """Each of ``texts`` shortened by :func:`short_path`, but two different paths never look alike: where their
    shortened forms would be equal, each keeps as much more of its tail as tells them apart."""
    shown = [short_path(t, limit) for t in texts]
    for length in range(limit + 1, max((len(str(t)) for t in texts), default=0) + 1):
        clashes = {s for s in shown if sum(s == other for other in shown) > 1}
        ambiguous = [i for i, s in enumerate(shown) if s in clashes
                     and any(str(texts[j]) != str(texts[i]) for j, o in enumerate(shown) if o == s)]
        if not ambiguous:
            break
        for i in ambiguous:
            shown[i] = short_path(texts[i], length)
    return shown
