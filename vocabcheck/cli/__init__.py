"""The command line: thin wrappers that parse options, call the library and render."""

from .app import app, console_main, main

__all__ = ["app", "console_main", "main"]
