"""The parts of the documentation that are generated from the code, so that they cannot drift from it.

- **Usage blocks**: a fenced block whose info string is ``usage`` holds one command's synopsis, generated from the
  command line itself (``typer.main.get_command(app)``): every argument and every option, with its default or what
  it takes. The block's first word after ``vocabcheck`` names the command; a block that names none is the
  top-level one (the global options and ``COMMAND``).
- **The findings table** of docs/findings.md, between ``<!-- findings-table -->`` and ``<!-- /findings-table -->``:
  one row per code of :data:`vocabcheck.findings.CODES`, in its order, with its text; the severity column is kept
  by hand (a new code gets ``?``) and checked against the severities the code gives its findings.

After changing a command's options (or a finding code), regenerate them::

    python -m tests.support.docs_blocks           # list the blocks that differ from the code (exit 1 if any)
    python -m tests.support.docs_blocks --write   # rewrite them in place

``tests/test_docs_usage.py`` fails, showing the expected block, whenever one differs.
"""

from __future__ import annotations

import ast
import enum
import re
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 100  # a synopsis wraps at this width, continuation lines indented under the first option
LONG_NAME = 16  # an option whose long name is longer than this is shown by its short name (-k)
TABLE_START, TABLE_END = "<!-- findings-table -->", "<!-- /findings-table -->"
FINDINGS_PAGE = ROOT / "docs" / "findings.md"
SEVERITIES = ("error", "warning", "info")

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})usage[ \t]*$")


def documents(root: Path = ROOT) -> list[Path]:
    """The pages whose usage blocks are checked: README.md and docs/*.md."""
    return [path for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if path.is_file()]


# --- the command line -------------------------------------------------------------------------------------------


def application():
    """The click command of the vocabcheck CLI (a group of commands)."""
    import typer

    from vocabcheck.cli.app import app

    return typer.main.get_command(app)


def commands(group=None) -> dict[str, object]:
    """The visible commands, by name."""
    group = group or application()
    return {name: command for name, command in group.commands.items() if not getattr(command, "hidden", False)}


def _annotation(param):
    descriptor = getattr(param, "type_descriptor", None)  # typer >= 0.2x keeps the annotation
    annotation = getattr(descriptor, "annotation", None)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        annotation = next((a for a in typing.get_args(annotation) if a is not type(None)), annotation)
    return annotation


def _choices(param) -> list[str] | None:
    annotation = _annotation(param)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return [str(value) for value in typing.get_args(annotation)]
    choices = getattr(getattr(param, "type", None), "choices", None)  # click's Choice (older typer)
    return [str(choice) for choice in choices] if choices else None


def _kind(param) -> str:
    """'path', 'int', 'float' or 'text': what the option takes."""
    annotation = _annotation(param)
    if typing.get_origin(annotation) in (list, tuple):
        annotation = (typing.get_args(annotation) or (str,))[0]
    if annotation is not None:
        if isinstance(annotation, type) and issubclass(annotation, Path):
            return "path"
        return {int: "int", float: "float"}.get(annotation, "text")
    name = getattr(getattr(param, "type", None), "name", "")  # click's type names (older typer)
    return {"path": "path", "integer": "int", "float": "float"}.get(name, "text")


def _default(param) -> str | None:
    default = param.default
    if default is None or default is False or default == () or default == [] or callable(default):
        return None
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, (list, tuple)):
        return ",".join(str(item) for item in default)
    return str(default)


def value_of(param) -> str:
    """What an option takes, as a synopsis shows it: its metavar, its choices, its default, or a word for its type."""
    if getattr(param, "metavar", None):
        return str(param.metavar)
    choices = _choices(param)
    if choices:
        return "|".join(choices)
    default = _default(param)
    if default is not None:
        return default
    kind = _kind(param)
    if kind == "path":
        return "DIR" if "directory" in (param.help or "").lower() else "FILE"
    return {"int": "N", "float": "X"}.get(kind, "TEXT")


def shown_name(param) -> str:
    """The long name, or the short one where the long name is longer than LONG_NAME characters."""
    longs = sorted((o for o in param.opts if o.startswith("--")), key=len)
    shorts = [o for o in param.opts if not o.startswith("--")]
    if longs and (len(longs[0]) <= LONG_NAME or not shorts):
        name = longs[0]
    else:
        name = shorts[0]
    return "/".join([name, *param.secondary_opts])


def _is_flag(param) -> bool:
    return bool(getattr(param, "is_flag", False)) or bool(getattr(param, "count", False))


def _option_word(param) -> str:
    word = shown_name(param) if _is_flag(param) else f"{shown_name(param)} {value_of(param)}"
    return (word if param.required else f"[{word}]") + ("..." if param.multiple else "")


def pieces(command) -> list[str]:
    """The synopsis of one command, word by word: its arguments, then its options in declaration order."""
    words = []
    for param in command.params:
        if param.param_type_name == "argument" and not getattr(param, "hidden", False):
            word = param.name.upper() + ("..." if param.nargs == -1 else "")
            words.append(word if param.required else f"[{word}]")
    return words + [_option_word(param) for param in command.params
                    if param.param_type_name == "option" and not getattr(param, "hidden", False)]


def synopsis(name: str | None, group=None) -> str:
    """The usage block's text for one command (``None``: the top level), wrapped at WIDTH."""
    group = group or application()
    if name is None:
        head = "vocabcheck"
        words = [_option_word(p) for p in group.params if not getattr(p, "hidden", False)] + ["COMMAND", "[ARGS]..."]
    else:
        head = f"vocabcheck {name}"
        words = pieces(commands(group)[name])
    lines, line = [], head
    indent = " " * (len(head) + 1)
    for word in words:
        if len(line) + 1 + len(word) > WIDTH and line.strip() != head:
            lines.append(line)
            line = indent + word
        else:
            line = f"{line} {word}"
    lines.append(line)
    return "\n".join(lines)


def option_names(command) -> set[str]:
    """Every name of every visible option of a command (``-k`` and ``--num-speculative-tokens`` alike)."""
    return {name for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)
            for name in [*p.opts, *p.secondary_opts]}


# --- usage blocks in the documents ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the block's first content line
    command: str | None  # None: the top-level synopsis
    text: str  # the block's content, without the fences


def named(body: str) -> str | None:
    """The command a usage block is for: the word after ``vocabcheck`` when it is a name (known or not), else None
    (the top level, whose next word is an option)."""
    words = body.split()
    if len(words) > 1 and words[0] == "vocabcheck" and re.fullmatch(r"[a-z][a-z0-9-]*", words[1]):
        return words[1]
    return None


def _fenced(lines: list[str]) -> Iterator[tuple[int, int]]:
    """(opening line, closing line) of each usage fence; the closing line is len(lines) for a fence never closed."""
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index].rstrip("\r\n"))
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opening.group("fence"):
            end += 1
        yield index, end
        index = end + 1


def usage_blocks(path: Path) -> Iterator[Block]:
    """The usage blocks of one Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for start, end in _fenced(lines):
        body = "\n".join(lines[start + 1:end])
        yield Block(path, start + 2, named(body), body)


def problems(root: Path = ROOT, group=None, paths: typing.Iterable[Path] | None = None) -> list[str]:
    """Every usage block (of ``paths``, default: every document) that is not what the command line says, with the
    block it should be."""
    group = group or application()
    names = commands(group)
    found = []
    for path in documents(root) if paths is None else paths:
        for block in usage_blocks(path):
            where = f"{path.relative_to(root)}:{block.line}"
            if block.command is not None and block.command not in names:
                found.append(f"{where}: `vocabcheck {block.command}` is not a command (commands: "
                             f"{', '.join(names)})")
                continue
            expected = synopsis(block.command, group)
            if block.text != expected:
                found.append(f"{where}: the usage block of `vocabcheck {block.command or ''}` differs from the "
                             f"command line; it should read\n```usage\n{expected}\n```\n(regenerate with "
                             "`python -m tests.support.docs_blocks --write`)")
    return found


def rewrite_usage(text: str, names: typing.Iterable[str], group=None) -> str:
    """The text with every usage block of a known command (or the top level) regenerated; a block naming an unknown
    command, or never closed, is left for the check to report."""
    group = group or application()
    names = set(names)
    lines = text.splitlines(keepends=True)
    for start, end in reversed(list(_fenced(lines))):
        command = named("".join(lines[start + 1:end]))
        if end < len(lines) and (command is None or command in names):
            lines[start + 1:end] = [synopsis(command, group) + "\n"]
    return "".join(lines)


# --- the findings table -----------------------------------------------------------------------------------------


def _severity_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Severity":
        return node.attr.lower() if node.attr.lower() in SEVERITIES else None
    return None


def severities(package: Path = ROOT / "vocabcheck") -> dict[str, set[str]]:
    """The severities the code gives each finding code, read from every call shaped ``Finding(code, Severity.X, ...)``
    (whatever the callee: a helper that builds findings counts too; ``code=``/``severity=`` keywords as well).

    A code written as an f-string (``f"pipeline.{name}"``) is keyed by its constant prefix ending in ``.``
    (``"pipeline."``); a code held in a variable is not seen."""
    found: dict[str, set[str]] = {}
    for source in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            code = node.args[0] if node.args else keywords.get("code")
            severity = node.args[1] if len(node.args) > 1 else keywords.get("severity")
            level = _severity_name(severity) if severity is not None else None
            if level is None:
                continue
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                key = code.value
            elif isinstance(code, ast.JoinedStr) and code.values and isinstance(code.values[0], ast.Constant):
                key = str(code.values[0].value)
                if not key.endswith("."):
                    continue
            else:
                continue
            found.setdefault(key, set()).add(level)
    return found


def severity_of(code: str, found: dict[str, set[str]]) -> set[str]:
    """What the code gives ``code``: its calls with the code written out, or else the f-string prefixes it starts
    with."""
    if code in found:
        return set(found[code])
    return set().union(*(levels for key, levels in found.items() if key.endswith(".") and code.startswith(key)))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table_rows(page_text: str) -> dict[str, tuple[str, str]]:
    """The findings table of a page: code → (severity, text), in the table's order."""
    body = page_text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0] if TABLE_START in page_text else ""
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2].replace("\\|", "|"))
    return rows


def findings_table(kept: dict[str, tuple[str, str]]) -> str:
    """The findings table for CODES, keeping each code's hand-kept severity (``?`` for a new code)."""
    from vocabcheck.findings import CODES

    lines = ["| code | severity | what it says |", "|---|---|---|"]
    lines += [f"| `{code}` | {kept.get(code, ('?', ''))[0]} | {_cell(text)} |" for code, text in CODES.items()]
    return "\n".join(lines)


def rewrite_findings(text: str) -> str:
    if TABLE_START not in text or TABLE_END not in text:
        return text
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_START}\n{findings_table(table_rows(text))}\n{TABLE_END}{tail}"


# --- the command ------------------------------------------------------------------------------------------------


def write(root: Path = ROOT) -> list[Path]:
    """Regenerate every usage block and the findings table; returns the files changed."""
    group = application()
    names = commands(group)
    changed = []
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        new = rewrite_usage(text, names, group)
        if path.resolve() == (root / "docs" / "findings.md").resolve():
            new = rewrite_findings(new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    if argv not in ([], ["--write"]):
        print("usage: python -m tests.support.docs_blocks [--write]", file=sys.stderr)
        return 2
    if argv == ["--write"]:
        for path in write():
            print(f"rewrote {path.relative_to(ROOT)}")
    left = problems()
    page = FINDINGS_PAGE.read_text(encoding="utf-8") if FINDINGS_PAGE.is_file() else ""
    if page and page.replace("\r", "") != rewrite_findings(page):
        left.append(f"{FINDINGS_PAGE.relative_to(ROOT)}: the findings table differs from vocabcheck.findings.CODES")
    for problem in left:
        print(problem)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
