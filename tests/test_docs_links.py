"""Every relative link in the Markdown a reader follows (README.md, CONTRIBUTING.md, docs/, reports/) leads to a file
or directory of the repository, and every ``#anchor`` to a heading of the file it points into (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent


def documents() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "reports").rglob("*.md"))]
    return [path for path in found if path.is_file()]


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+[\"'(][^)]*)?\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
_HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
_HTML_ANCHOR = re.compile(r"<[^>]*\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans (code is blanked, line structure kept)."""
    return _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), outside_fences(text))


def outside_fences(text: str) -> str:
    """The text outside fenced code blocks (blanked, line structure kept); code spans stay, as in headings."""
    lines, fence = [], None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def links(text: str) -> list[str]:
    body = prose(text)
    found = [m.group(1) for pattern in (_INLINE, _REFERENCE, _HTML) for m in pattern.finditer(body)]
    return [target[1:-1] if target.startswith("<") else target for target in found]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower-cased, without punctuation other than - and _, spaces as -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")  # inline HTML and code marks
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a document: its headings' slugs (a repeated heading gets -1, -2...) and HTML ids and names."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    lines = outside_fences(text).splitlines()  # a heading's code spans are part of its anchor, as on GitHub
    for index, line in enumerate(lines):
        atx = _ATX.match(line)
        setext = index > 0 and lines[index - 1].strip() and not _ATX.match(lines[index - 1]) and _SETEXT.match(line)
        title = atx.group(2) if atx else lines[index - 1] if setext else None
        if title is None:
            continue
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(m.group(1) for m in _HTML_ANCHOR.finditer(text))
    return found


def broken(document: Path, root: Path = ROOT) -> list[str]:
    problems = []
    text = document.read_text(encoding="utf-8")
    for target in links(text):
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # a URL with a scheme: not a file of the repository
        path_part, _, anchor = target.partition("#")
        path = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not path.exists():
            problems.append(f"{target}: no such file")
        elif not path.is_relative_to(root):
            problems.append(f"{target}: outside the repository")
        elif anchor and path.suffix == ".md" and unquote(anchor) not in anchors(path.read_text(encoding="utf-8")):
            problems.append(f"{target}: no heading #{anchor} in {path.relative_to(root)}")
    return problems


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document):
    assert broken(document) == []


def test_the_documents_a_reader_starts_from_are_checked():
    names = {str(p.relative_to(ROOT)) for p in documents()}
    assert {"README.md", "CONTRIBUTING.md", "reports/README.md"} <= names
    assert any(name.startswith("docs/") for name in names)


def test_slugs_are_githubs():
    assert slug("The demo pair") == "the-demo-pair"
    assert slug("`vocabcheck compare`: what it checks") == "vocabcheck-compare-what-it-checks"
    assert slug("Speed — 2× faster (on 2 cores)") == "speed--2-faster-on-2-cores"
    assert slug("snake_case and [a link](x.md)") == "snake_case-and-a-link"


def test_a_broken_link_an_unknown_anchor_and_links_in_code_are_told_apart(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## Part two\n\nSetext heading\n---\n")
    document = tmp_path / "doc.md"
    document.write_text("# Top\n\n[ok](other.md#part-two) [setext](other.md#setext-heading) [self](#top)\n"
                        "[missing](nowhere.md) [bad anchor](other.md#part-three) ![img](gone.png)\n"
                        "`[code](not-a-link.md)`\n\n```\n[fenced](not-a-link-either.md)\n```\n"
                        "[web](https://example.com/x.md) [up](../outside.md)\n\n[ref]: other.md#nothing\n")
    (tmp_path.parent / "outside.md").write_text("# Outside\n")
    assert broken(document, tmp_path) == ["nowhere.md: no such file", "other.md#part-three: no heading #part-three in other.md",
                                "gone.png: no such file", "../outside.md: outside the repository",
                                "other.md#nothing: no heading #nothing in other.md"]
