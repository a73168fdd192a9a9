"""HTML as a small tree (for the engines' result pages) and as readable text
(for web_fetch): scripts, styles and other non-content dropped; headings,
links, list items and paragraphs kept as simple markdown-like text.
Standard library html.parser only."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from urllib.parse import urljoin

VOID = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
})
HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas", "head"})
BLOCKS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "blockquote", "pre", "table",
    "tr", "ul", "ol", "dl", "dt", "dd", "form", "figure", "figcaption", "address", "details", "summary", "body",
})
HEADINGS = {f"h{n}": n for n in range(1, 7)}
MAX_NODES = 200_000
"""Elements kept from one page; a page with more is read that far."""
MAX_DEPTH = 256
"""Nesting kept; deeper elements are read as children of the deepest kept one,
so a hostile page of 100,000 nested tags costs no deep tree to walk."""


class Node:
    __slots__ = ("tag", "attrs", "children", "parent")

    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self) -> Iterator[Node]:
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed([c for c in node.children if isinstance(c, Node)]))

    def find_all(self, tag: str | None = None, cls: str | None = None, where: Callable[[Node], bool] | None = None) -> list[Node]:
        return [
            n for n in self.iter()
            if n is not self and (tag is None or n.tag == tag) and (cls is None or cls in n.classes) and (where is None or where(n))
        ]

    def find(self, tag: str | None = None, cls: str | None = None, where: Callable[[Node], bool] | None = None) -> Node | None:
        found = self.find_all(tag, cls, where)
        return found[0] if found else None

    def text(self, skip_classes: frozenset[str] = frozenset()) -> str:
        """The text inside, whitespace collapsed; elements of skip_classes left out."""
        parts: list[str] = []
        stack: list[Node | str] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item is self or (item.tag not in HIDDEN and not item.classes & skip_classes):
                stack.extend(reversed(item.children))
        return " ".join("".join(parts).split())


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.current = self.root
        self.count = 0
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.count >= MAX_NODES:
            return
        self.count += 1
        node = Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in VOID and self.depth < MAX_DEPTH:
            self.current = node
            self.depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.count < MAX_NODES:
            self.count += 1
            self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.current
        levels = 0
        while node is not None and node.tag != tag:
            node, levels = node.parent, levels + 1
        if node is not None and node.parent is not None:  # an unmatched end tag is ignored
            self.current = node.parent
            self.depth -= levels + 1

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(html: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def title_of(root: Node) -> str:
    title = root.find("title")
    return title.text() if title is not None else ""


def readable_text(html: str, base_url: str = "") -> str:
    """The page's content as text: `# heading`, `[text](url)`, `- item`,
    paragraphs separated by blank lines."""
    root = parse(html)
    out: list[str] = []
    title = title_of(root)
    if title:
        out.append(f"Title: {title}\n\n")
    _render(root, base_url, out)
    text = "".join(out)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _render(node: Node, base_url: str, out: list[str]) -> None:
    for child in node.children:
        if isinstance(child, str):
            out.append(child)
            continue
        tag = child.tag
        if tag in HIDDEN or "hidden" in child.attrs or child.attrs.get("aria-hidden") == "true":
            continue
        if tag in HEADINGS:
            text = child.text()
            if text:
                out.append(f"\n\n{'#' * HEADINGS[tag]} {text}\n\n")
        elif tag == "a":
            text = child.text()
            href = child.attrs.get("href", "").strip()
            if href and not href.startswith(("javascript:", "#", "mailto:")) and text:
                out.append(f" [{text}]({urljoin(base_url, href)}) ")
            elif text:
                out.append(f" {text} ")
        elif tag == "br":
            out.append("\n")
        elif tag == "li":
            out.append("\n- ")
            _render(child, base_url, out)
        elif tag in ("td", "th"):
            _render(child, base_url, out)
            out.append(" | ")
        elif tag == "img":
            alt = child.attrs.get("alt", "").strip()
            if alt:
                out.append(f" [image: {alt}] ")
        elif tag in BLOCKS:
            out.append("\n\n")
            _render(child, base_url, out)
            out.append("\n\n")
        else:
            _render(child, base_url, out)
