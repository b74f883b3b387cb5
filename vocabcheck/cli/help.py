"""``--help`` as a person would write it: a flag shows no type (typer shows ``<bool>``), an option that takes a value
shows one word for it (PATH, INTEGER, NUMBER, TEXT), an argument its name in capitals (``TARGET [DRAFT]``), and a
description is reflowed from its docstring's paragraphs (a docstring's line breaks are not the reader's).

The command classes below are what the application registers; they change only what help shows, never what a
command parses or does."""

from __future__ import annotations

import inspect
import pathlib
import typing

from typer.core import TyperCommand, TyperGroup

_WORDS = {int: "INTEGER", float: "NUMBER", str: "TEXT"}


def reflow(text: str | None) -> str | None:
    """Each paragraph of ``text`` on one line (paragraphs stay apart); a paragraph that starts with click's ``\\b``
    keeps its lines."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def value_word(param) -> str:
    """What an option takes, in one word; empty for a flag."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    descriptor = getattr(param, "type_descriptor", None)  # typer >= 0.2x keeps the annotation
    annotation = getattr(descriptor, "annotation", None)
    if typing.get_origin(annotation) is list:
        annotation = (typing.get_args(annotation) or (str,))[0]
    if isinstance(annotation, type) and issubclass(annotation, pathlib.PurePath):
        return "PATH"
    if annotation in _WORDS:
        return _WORDS[annotation]
    name = getattr(getattr(param, "type", None), "name", "")  # click's type names (older typer)
    return {"boolean": "", "integer": "INTEGER", "float": "NUMBER", "path": "PATH"}.get(name, "TEXT")


def tidy(params) -> None:
    """Set the metavars help shows (only help reads them once a command line is parsed)."""
    for param in params:
        if param.param_type_name == "option" and param.metavar is None:  # a metavar a command gave stays
            param.metavar = value_word(param)
        elif param.param_type_name == "argument":
            param.metavar = param.metavar or param.name.upper()
            if hasattr(param, "display_type_rich"):  # typer >= 0.2x: no type column beside an argument's name
                param.display_type_rich = lambda ctx: None


def usage(command, ctx) -> list[str]:
    """``[OPTIONS] TARGET [DRAFT]``: a required argument bare, an optional one in brackets, a repeated one with
    ``...``."""
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if param.param_type_name != "argument":
            continue
        name = param.name.upper()
        name = name if param.required else f"[{name}]"
        pieces.append(name + ("..." if param.nargs != 1 else ""))
    return pieces


class Command(TyperCommand):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = reflow(self.help)

    def collect_usage_pieces(self, ctx) -> list[str]:
        return usage(self, ctx)

    def format_help(self, ctx, formatter) -> None:
        tidy(self.get_params(ctx))
        super().format_help(ctx, formatter)


class Group(TyperGroup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = reflow(self.help)

    def format_help(self, ctx, formatter) -> None:
        tidy(self.get_params(ctx))
        super().format_help(ctx, formatter)
