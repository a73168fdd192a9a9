"""What the model sees of a page: its visible text and interactive elements in
page order, each element with the index that click_element, input_text and
the dropdown actions take.

One script, run in the page after every action, walks the visible part of the
document, marks each interactive element with MARK (its index), and returns
short descriptions, text runs, the scroll position and the title. Actions
find their element again by that mark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARK = "data-dm-index"
MAX_VISITED = 100_000
"""DOM nodes the script looks at: its cost stays bounded on a page of a
million nodes (the rest of such a page gets no indices)."""
MAX_MARKED = 2000
"""Elements indexed on one page."""
MAX_LISTED = 150
"""Elements listed in one observation; those near the viewport come first."""
MAX_LIST_CHARS = 10_000
"""Characters of the listing (elements and text) in one observation."""
TEXT_CHARS = 80
"""Characters of an element's text in the list."""
RUN_CHARS = 300
"""Characters of one run of plain text."""
ATTRIBUTE_CHARS = 100

SHOWN_ATTRIBUTES = ("type", "name", "placeholder", "aria-label", "role", "title", "alt", "href", "value")

COLLECT = """
([mark, maxVisited, maxMarked, textChars, runChars, attributeChars, shown]) => {
  const interactive = [
    'a[href]', 'button', 'input:not([type=hidden])', 'select', 'textarea', 'summary',
    '[role=button]', '[role=link]', '[role=checkbox]', '[role=tab]', '[role=menuitem]',
    '[role=radio]', '[role=switch]', '[role=option]', '[onclick]',
    '[contenteditable=""]', '[contenteditable=true]',
  ].join(',');
  // Their content is the element's own text: not walked into.
  const leaves = new Set(['a', 'button', 'input', 'select', 'textarea', 'summary', 'option']);
  const skipped = new Set(['script', 'style', 'noscript', 'template', 'svg', 'head', 'iframe', 'object', 'canvas']);
  for (const old of document.querySelectorAll('[' + mark + ']')) old.removeAttribute(mark);
  const cut = (text, n) => (text || '').replace(/\\s+/g, ' ').trim().slice(0, n);
  const height = window.innerHeight;
  const near = (box) => box.bottom >= -height && box.top <= 2 * height;
  const items = [];
  let marked = 0, visited = 0, capped = false;
  const root = document.body || document.documentElement;
  let node = root;
  while (node) {
    if (++visited > maxVisited) { capped = true; break; }
    let descend = true;
    if (node.nodeType === Node.ELEMENT_NODE) {
      const tag = node.tagName.toLowerCase();
      if (skipped.has(tag) || !node.checkVisibility()) {
        descend = false;  // display: none and the like hide the whole subtree
      } else if (node.matches(interactive)) {
        const box = node.getBoundingClientRect();
        if ((box.width >= 1 || box.height >= 1) && getComputedStyle(node).visibility !== 'hidden') {
          if (marked >= maxMarked) { capped = true; break; }
          const index = marked++;
          node.setAttribute(mark, String(index));
          const attrs = [];
          for (const name of shown) {
            let value = name === 'value' ? null : node.getAttribute(name);
            if (name === 'value' && (tag === 'input' || tag === 'textarea') && node.type !== 'password') value = node.value;
            if (value) attrs.push([name, cut(value, attributeChars)]);
          }
          let text;
          if (tag === 'select') text = node.selectedIndex >= 0 ? node.options[node.selectedIndex].text : '';
          else if (tag === 'input' || tag === 'textarea') text = '';
          else text = node.innerText || node.textContent;
          items.push({index, tag, attrs, text: cut(text, textChars), near: near(box)});
        }
        descend = !leaves.has(tag);
      }
    } else if (node.nodeType === Node.TEXT_NODE) {
      const text = cut(node.nodeValue, runChars);
      const parent = node.parentElement;
      if (text && parent && getComputedStyle(parent).visibility !== 'hidden') {
        const range = document.createRange();
        range.selectNodeContents(node);
        const box = range.getBoundingClientRect();
        if (box.width >= 1 || box.height >= 1) items.push({text, near: near(box)});
      }
    }
    if (descend && node.firstChild) { node = node.firstChild; continue; }
    while (node && node !== root && !node.nextSibling) node = node.parentNode;
    node = node && node !== root ? node.nextSibling : null;
  }
  const scroller = document.scrollingElement || document.documentElement;
  return {items, capped, scrollY: Math.round(window.scrollY), viewportHeight: height,
          pageHeight: scroller ? scroller.scrollHeight : 0, title: document.title};
}
"""

COLLECT_ARGUMENTS = [MARK, MAX_VISITED, MAX_MARKED, TEXT_CHARS, RUN_CHARS, ATTRIBUTE_CHARS, list(SHOWN_ATTRIBUTES)]


@dataclass(frozen=True)
class Item:
    """An interactive element (index set) or a run of plain text (index None)."""

    text: str
    near: bool
    """Within a viewport's height of the visible part of the page."""
    index: int | None = None
    tag: str = ""
    attrs: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        if self.index is None:
            return self.text
        attrs = "".join(f' {name}="{value.replace(chr(34), chr(39))}"' for name, value in self.attrs)
        return f"[{self.index}]<{self.tag}{attrs}>{self.text}</{self.tag}>"


@dataclass(frozen=True)
class PageMap:
    url: str
    title: str
    items: list[Item] = field(default_factory=list)
    capped: bool = False
    """The page is larger than the script reads (MAX_VISITED, MAX_MARKED)."""
    scroll_y: int = 0
    viewport_height: int = 0
    page_height: int = 0

    @classmethod
    def from_script(cls, url: str, found: dict) -> PageMap:
        items = [
            Item(
                text=str(item.get("text") or ""),
                near=bool(item.get("near")),
                index=int(item["index"]) if item.get("index") is not None else None,
                tag=str(item.get("tag") or ""),
                attrs=tuple((str(n), str(v)) for n, v in item.get("attrs") or ()),
            )
            for item in found.get("items", [])
        ]
        return cls(
            url=url,
            title=str(found.get("title") or ""),
            items=items,
            capped=bool(found.get("capped")),
            scroll_y=int(found.get("scrollY") or 0),
            viewport_height=int(found.get("viewportHeight") or 0),
            page_height=int(found.get("pageHeight") or 0),
        )

    @property
    def elements(self) -> list[Item]:
        return [item for item in self.items if item.index is not None]

    def lines(self) -> list[str]:
        """The page in order: what is near the view (text and elements), then
        elements further away while there is room; a last line on what was
        left out."""
        chosen: set[int] = set()
        size = listed = 0

        def take(position: int, item: Item) -> None:
            nonlocal size, listed
            cost = len(item.line()) + 1
            if size + cost > MAX_LIST_CHARS or (item.index is not None and listed >= MAX_LISTED):
                return
            chosen.add(position)
            size += cost
            listed += item.index is not None

        for position, item in enumerate(self.items):
            if item.near:
                take(position, item)
        for position, item in enumerate(self.items):
            if not item.near and item.index is not None:
                take(position, item)
        lines = [item.line() for position, item in enumerate(self.items) if position in chosen]
        left_out = len(self.elements) - listed
        if left_out > 0 or self.capped:
            more = f"{left_out}{'+' if self.capped else ''}"
            lines.append(f"[... {more} more elements not listed; scroll to bring them near the view]")
        return lines


def selector(index: int) -> str:
    return f'[{MARK}="{index}"]'
