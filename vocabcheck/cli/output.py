"""Writing command output: JSON to stdout, report files written atomically."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import atomic
from ..errors import InputError


def emit_json(document: Mapping[str, Any]) -> None:
    from ..render.data import dumps
    from ..render.terminal import discard_output

    # a path that is not UTF-8 holds surrogates ('\udcff'): written as the JSON escape "\udcff", the document stays
    # valid JSON and reads back to the same string
    try:
        sys.stdout.write(dumps(dict(document)).encode("utf-8", "backslashreplace").decode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (``... --json | head -1``): the command's exit code stands
        discard_output(sys.stdout)


def write_outputs(files: Mapping[Path | None, Callable[[], str]]) -> None:
    """Render every requested file first, then write each atomically; ``None`` paths are skipped."""
    rendered = {path: make() for path, make in files.items() if path is not None}
    for path in rendered:
        if path.exists() and path.is_dir():
            raise InputError("is a directory; expected a file to write", path)
    for path, text in rendered.items():
        try:
            atomic.write_text(path, text)
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", path) from exc
