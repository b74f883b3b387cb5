"""The command line: thin wrappers that parse options, call the library and render."""

from .app import app, main, run

__all__ = ["app", "main", "run"]
