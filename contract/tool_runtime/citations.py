"""Citations: the model's answer tied to the sources a tool gave it.

A file is cited at a point of the text (`file_citation`'s `index`); a web page over the sentence
that uses it (`url_citation`'s `start_index` and `end_index`).

A tool that returns sources (file_search's chunks, web_search's pages) numbers them in what the
model reads, `[1]`, `[2]`..., and asks the model to cite by number. `MarkerCitations` reads the
answer as it streams: a marker that names a source (`[2]`, `[1, 3]`, `【2】`, `【2†source】`)
is taken out of the text, with the whitespace before it, and becomes an annotation at that
point of the text; anything else in brackets is left as written. The text is held back only
while a marker may be starting, so the stream stays live.

Small models often use what they read without citing it. When an answer cites nothing, the
sources whose distinctive words it shares are cited at its end, so an answer drawn from sources
is never returned without them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MarkerCitations", "Source", "numbered_sources", "sentence_start"]

Annotation = dict[str, Any]

_MARKER = re.compile(r"\s*(?:【([^】\n]{1,40})】|\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\])")
_PARTIAL = re.compile(r"(?:【[^】\n]{0,40}|\[[\d\s,;]{0,24})$")
_NUMBER = re.compile(r"\d{1,3}")
_WORD = re.compile(r"[^\W\d_]{4,}", re.UNICODE)
_COMMON = frozenset("""about above after again against also among because been before being below between both could does doing down
during each either every from further have having here into itself just like made make many more most much must never only other
ought over same should some such than that their them then there these they this those through under until upon very were what
when where which while whom will with within without would your yours answer question according document documents file files
text source sources""".split())
MAX_FALLBACK = 3


@dataclass(frozen=True)
class Source:
    """A source the model was given: its annotation (`index` is added where it is cited) and
    its text (for answers that cite nothing)."""

    annotation: Mapping[str, Any]
    text: str


def numbered_sources(sources: Sequence[Source], render: Callable[[int, Source], str]) -> str:
    """The sources as the model reads them, each under its number, with how to cite them."""
    if not sources:
        return "No results were found."
    body = "\n\n".join(render(number, source) for number, source in enumerate(sources, 1))
    return (f"{body}\n\nCite the sources you use by their number in square brackets, right after the sentence that uses them, "
            "like this: [1].")


class MarkerCitations:
    """Implements contract.tool_runtime.protocol.Citations over numbered sources."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = list(sources)
        self._held = ""
        self._emitted: list[str] = []
        self._length = 0
        self._cited = False

    def feed(self, text: str) -> tuple[str, list[Annotation]]:
        self._held += text
        return self._drain(final=False)

    def finish(self) -> tuple[str, list[Annotation]]:
        text, annotations = self._drain(final=True)
        if not self._cited:
            annotations += self._fallback()
        return text, annotations

    def _drain(self, final: bool) -> tuple[str, list[Annotation]]:
        out: list[str] = []
        annotations: list[Annotation] = []
        while (match := _MARKER.search(self._held)) is not None:
            numbers = [int(n) for n in _NUMBER.findall(match.group(1) or match.group(2))]
            if match.group(1) is not None:
                numbers = numbers[:1]  # 【2†source】, 【4:2†source】: the first number names it
            if numbers and all(1 <= n <= len(self.sources) for n in numbers):
                self._put(out, self._held[:match.start()])
                for number in dict.fromkeys(numbers):
                    annotations.append(self._placed(self.sources[number - 1].annotation))
                self._cited = True
            else:
                self._put(out, self._held[:match.end()])
            self._held = self._held[match.end():]
        if final:
            self._put(out, self._held)
            self._held = ""
        else:
            partial = _PARTIAL.search(self._held)
            keep = partial.start() if partial is not None else len(self._held)
            keep = len(self._held[:keep].rstrip())  # whitespace before a marker goes with it
            self._put(out, self._held[:keep])
            self._held = self._held[keep:]
        return "".join(out), annotations

    def _put(self, out: list[str], text: str) -> None:
        if text:
            out.append(text)
            self._emitted.append(text)
            self._length += len(text)

    def _fallback(self) -> list[Annotation]:
        answer = _words("".join(self._emitted))
        if not answer:
            return []
        needed = max(2, min(5, len(answer) // 4))
        scored: dict[str, tuple[int, Source]] = {}
        for source in self.sources:
            shared = len(answer & _words(source.text))
            key = repr(sorted((k, v) for k, v in source.annotation.items() if isinstance(v, str)))
            if shared >= needed and shared > scored.get(key, (0, source))[0]:
                scored[key] = (shared, source)
        best = sorted(scored.values(), key=lambda entry: -entry[0])[:MAX_FALLBACK]
        return [self._placed(source.annotation, whole=True) for _, source in best]

    def _placed(self, annotation: Mapping[str, Any], whole: bool = False) -> Annotation:
        """The annotation where the answer now ends: a point (`index`) for a file, the sentence
        it closes (`start_index`, `end_index`) for a web page; the whole answer for a fallback."""
        if annotation.get("type") != "url_citation":
            return {**annotation, "index": self._length}
        start = 0 if whole else sentence_start("".join(self._emitted))
        return {**annotation, "start_index": start, "end_index": self._length}


_SENTENCE_END = re.compile(r"[.!?;:](?=\s)|\n")


def sentence_start(text: str) -> int:
    """Where the sentence ending `text` begins (past the whitespace after the previous one): a
    `url_citation` placed now starts there, and one placed later, when `text` has grown, never
    before it (a front end that splits the text at citations relies on it)."""
    body = text.rstrip()
    ends = [match.end() for match in _SENTENCE_END.finditer(body[:-1])]
    start = ends[-1] if ends else 0
    while start < len(body) and body[start].isspace():
        start += 1
    return start


def _words(text: str) -> set[str]:
    return {word for word in (w.lower() for w in _WORD.findall(text)) if word not in _COMMON}
