"""Plain text that every layer shares: control characters made visible, and clipping (the views, the one-line
errors, the align plan).

Everything a view shows may come from a stranger's file: a config's ``architectures``, a file name, a hub answer, a
token string, a shard name in an error's prefix. A terminal acts on control characters (``ESC [41m`` paints the
screen, ``ESC ] 0;...`` sets the window title, ``CSI`` in its one-byte C1 form does the same), and Markdown viewers
pass some of them on. :func:`printable` is the one function that turns them into visible escapes; the terminal
console (:func:`vocabcheck.render.terminal.console`), the Markdown reports and the one-line errors
(:meth:`vocabcheck.errors.VocabcheckError.one_line`) all go through it. JSON documents keep the exact data (JSON
escapes control characters itself).

A leaf: this module imports nothing from vocabcheck, so that any module may use it without reaching up into
:mod:`vocabcheck.render`.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the Unicode bidirectional embeddings, overrides and isolates (which reorder what
# a line shows: "Trojan Source")
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with each control character written as a Python-style escape (ESC becomes the four characters
    ``\\x1b``), except the characters in ``keep`` (a view's own line breaks: ``"\\n"``). Text without control
    characters is returned unchanged, so applying it twice changes nothing."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters: longer text is cut and ends with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
