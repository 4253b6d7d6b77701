"""Text out of markup: the visible text of an HTML document, without scripts and styles, block
elements ending lines. For extraction (vector stores) and pages read by tools (web_search)."""

from __future__ import annotations

from html.parser import HTMLParser

__all__ = ["HTMLText", "html_text"]

_BLOCKS = frozenset({"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer", "h1", "h2", "h3",
                     "h4", "h5", "h6", "pre", "blockquote", "title", "hr", "dd", "dt", "figcaption", "main", "nav", "aside"})
_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg"})


class HTMLText(HTMLParser):
    """The text of an HTML document, fed in pieces (`feed`, then `take` what is ready)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._skipping = 0
        self._out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skipping += 1
        elif tag in _BLOCKS:
            self._out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _BLOCKS:
            self._out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._out.append(data)

    def take(self) -> str:
        text, self._out = "".join(self._out), []
        return text


def html_text(html: str) -> str:
    """A whole document's text, its blank runs collapsed."""
    parser = HTMLText()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in parser.take().splitlines())
    return "\n".join(line for line in lines if line)
