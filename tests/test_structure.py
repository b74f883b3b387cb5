"""The shape of the code, checked: no import cycle inside vocabcheck (module-level and function-level imports alike),
no import of the views (render/, cli/) from below them, no module over 450 lines and no function of the decoder over 60 lines, except the entries of an allow-list that
says why (and an entry that is no longer needed fails too). Each failure names the cycles or the offenders."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vocabcheck"

IMPORT_CYCLES: dict[frozenset[str], str] = {}  # groups of modules that import each other → why, for now

# the layers from the top: the command line (cli/, and __main__ that starts it), then the views (render/), then
# everything else (the domain, the decoder, the sources...); a module imports only from its own layer or below
LAYERS = (("vocabcheck.__main__", "vocabcheck.cli"), ("vocabcheck.render",))
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}  # (importer, imported) → why, for now

MAX_MODULE_LINES = 450
LONG_MODULES: dict[str, str] = {}  # path under vocabcheck/ → why it may be longer

MAX_DECODE_FUNCTION_LINES = 60
LONG_DECODE_FUNCTIONS: dict[str, str] = {}  # "path:qualified name" under vocabcheck/ → why it may be longer


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its __init__.py)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules that ``name`` (at ``path``) imports anywhere in its body: at module level, in functions,
    under ``if TYPE_CHECKING``. ``from P import x`` imports the module P.x when there is one, else P itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import vocabcheck.x.y`` where y is an attribute
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> dict[frozenset[str], list[str]]:
    """The groups of modules of ``graph`` that import each other (strongly connected components), each with one
    cycle through it as a path [a, b, ..., a]."""
    order: list[str] = []
    seen: set[str] = set()
    for start in sorted(graph):  # first pass: modules by the time their search finished (iteratively)
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(sorted(graph[start])))]
        while stack:
            node, rest = stack[-1]
            nxt = next((n for n in rest if n not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    reverse: dict[str, set[str]] = {node: set() for node in graph}
    for node, targets in graph.items():
        for target in targets:
            reverse[target].add(node)
    found: dict[frozenset[str], list[str]] = {}
    assigned: set[str] = set()
    for root in reversed(order):  # second pass, on the reversed graph: one component per search
        if root in assigned:
            continue
        group, todo = set(), [root]
        while todo:
            node = todo.pop()
            if node not in assigned:
                assigned.add(node)
                group.add(node)
                todo.extend(reverse[node] - assigned)
        if len(group) > 1:
            found[frozenset(group)] = _path_through(min(group), group, graph)
    return found


def _path_through(start: str, group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest cycle from ``start`` back to itself inside ``group``."""
    previous = {start: ""}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                path = [node]
                while previous[path[-1]]:
                    path.append(previous[path[-1]])
                return path[::-1] + [start]
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")


def test_the_package_has_no_import_cycle_except_the_listed_ones():
    graph = import_graph()
    assert "vocabcheck.errors" in graph["vocabcheck.cli.app"]  # the walk sees imports
    assert "vocabcheck.render.progress" in graph["vocabcheck.cli.app"]  # function-level ones too
    found = cycles(graph)
    unexpected = [" → ".join(cycle) for group, cycle in found.items() if group not in IMPORT_CYCLES]
    assert unexpected == [], "import cycles: " + "; ".join(unexpected)
    stale = [sorted(group) for group in IMPORT_CYCLES if group not in found]
    assert stale == [], f"allow-listed import cycles that are gone (remove them from the list): {stale}"


def layer(name: str) -> int:
    """0 for the command line, 1 for the views, 2 for every other module."""
    return next((rank for rank, tops in enumerate(LAYERS)
                 if any(name == top or name.startswith(top + ".") for top in tops)), len(LAYERS))


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) where a module imports one of a higher layer."""
    return {(name, target) for name, targets in graph.items() for target in targets if layer(target) < layer(name)}


def test_nothing_below_the_views_and_the_command_line_imports_them():
    graph = import_graph()
    assert layer("vocabcheck.cli.app") == layer("vocabcheck.__main__") == 0
    assert layer("vocabcheck.render.terminal") == 1 and "vocabcheck.render.terminal" in graph
    assert layer("vocabcheck.errors") == layer("vocabcheck.decode.session") == layer("vocabcheck") == 2
    found = upward_imports(graph)
    unexpected = sorted(f"{a} imports {b}" for a, b in found if (a, b) not in LAYER_EXCEPTIONS)
    assert unexpected == [], "imports from a lower layer into the views or the command line: " + "; ".join(unexpected)
    stale = sorted(pair for pair in LAYER_EXCEPTIONS if pair not in found)
    assert stale == [], f"allow-listed upward imports that are gone (remove them from the list): {stale}"


def test_upward_imports_are_found():
    graph = {"vocabcheck.errors": {"vocabcheck.render.terminal"}, "vocabcheck.render.terminal": {"vocabcheck.cli.app"},
             "vocabcheck.cli.app": {"vocabcheck.render.terminal", "vocabcheck.errors"}}
    assert upward_imports(graph) == {("vocabcheck.errors", "vocabcheck.render.terminal"),
                                     ("vocabcheck.render.terminal", "vocabcheck.cli.app")}


def test_cycles_are_reported_as_paths():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == {frozenset("abc"): ["a", "b", "c", "a"], frozenset("de"): ["d", "e", "d"]}
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == {}


def test_no_module_is_over_450_lines_except_the_listed_ones():
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
               for p in PACKAGE.rglob("*.py")}
    stale = {path: lengths.get(path) for path in LONG_MODULES if lengths.get(path, 0) <= MAX_MODULE_LINES}
    assert stale == {}, f"allow-listed modules that are gone or no longer over {MAX_MODULE_LINES} lines: {stale}"
    over = {path: n for path, n in sorted(lengths.items()) if n > MAX_MODULE_LINES and path not in LONG_MODULES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines: {over}"
    assert all(reason.strip() for reason in [*IMPORT_CYCLES.values(), *LONG_MODULES.values(),
                                              *LONG_DECODE_FUNCTIONS.values(), *LAYER_EXCEPTIONS.values()])


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of each function and method of a module (decorators included), by qualified name."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    found[name] = child.end_lineno - first + 1
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return found


def test_no_function_of_the_decoder_is_over_60_lines_except_the_listed_ones():
    lengths = {f"{path.relative_to(PACKAGE)}:{name}": n for path in sorted((PACKAGE / "decode").glob("*.py"))
               for name, n in function_lengths(path).items()}
    stale = {f: lengths.get(f) for f in LONG_DECODE_FUNCTIONS if lengths.get(f, 0) <= MAX_DECODE_FUNCTION_LINES}
    assert stale == {}, f"allow-listed functions gone or no longer over {MAX_DECODE_FUNCTION_LINES} lines: {stale}"
    over = {f: n for f, n in lengths.items() if n > MAX_DECODE_FUNCTION_LINES and f not in LONG_DECODE_FUNCTIONS}
    assert over == {}, f"functions of vocabcheck/decode over {MAX_DECODE_FUNCTION_LINES} lines: {over}"


def test_function_lengths_count_methods_and_nested_functions(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("class A:\n    @staticmethod\n    def f():\n        def g():\n            pass\n        return g\n")
    assert function_lengths(path) == {"A.f": 5, "A.f.g": 2}


def test_only_the_method_registry_compares_method_names():
    """vocabcheck.methods is the one place that knows the methods: no other module compares a method with a bare
    name ("draft", "ngram", "none"); it asks the descriptor (``method.proposes``, ``method.needs_draft``...)."""
    names = {"draft", "ngram", "none"}

    def constants(node: ast.AST) -> set[str]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}

    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "methods.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Compare):
                named = set().union(*(constants(n) for n in [node.left, *node.comparators])) & names
                if named and "method" in ast.unparse(node):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []
