"""The docs cannot drift from the code.

Over README.md, CONTRIBUTING.md and docs/*.md:

- every relative link points to a file that exists, and its `#anchor` (in a Markdown file) to one of
  that file's headings, by GitHub's slug;
- README.md links to every page of docs/ (and docs/index.md does too), and every page either names exists;
- every ```yaml block is a run.yaml, whole or a fragment, that parses with the config model
  (`builder.load.parse_config`) and whose providers' `config` validate against their own config models;
  a block that is not run.yaml (a compose file, an OpenAPI excerpt) has `<!-- not run.yaml -->` on
  the line before its fence. A fragment (only `server:`, say) is merged into a minimal document;
- every ```python block parses (`ast.parse`), and what it imports from the project's packages
  (`from contract.spec import Api, ProviderContext, ProviderSpec`) is there; every ```toml block parses;
- every repository path in backticks (`runtime/http/sse.py`) exists, and every dotted name of the
  project's packages in backticks (`contract.spec.ProviderSpec`) imports.
"""

from __future__ import annotations

import ast
import copy
import importlib
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.envsubst import substitute
from builder.errors import ConfigError
from builder.load import parse_config
from builder.plugins import load_spec, parse_api
from builder.validation import validate_model

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
PAGES = sorted(DOCS.glob("*.md"))
FILES = [README, CONTRIBUTING, *PAGES]

NOT_RUN_YAML = "<!-- not run.yaml -->"
"""On the line before a ```yaml fence: the block is not a run.yaml (nor a fragment of one)."""

BASE_DOCUMENT: dict[str, Any] = {"version": 1, "name": "docs"}
"""What a fragment is merged into: every other key of the schema has a default."""

ENV = {
    "VLLM_URL": "http://127.0.0.1:8000/v1",
    "VLLM_API_KEY": "token-abc123",
    "STACK_STATE_DIR": "/tmp/stack-docs",
    "CI_KEY": "ci-key-0123456789",
    "GITHUB_TOKEN": "ghp_0123456789abcdef",
}
"""A value for every `${env.NAME}` the snippets use (a name missing here fails the snippet, naming it)."""

PACKAGES = ("contract", "builder", "runtime", "providers")
TOP_LEVEL = (*PACKAGES, "tests", "bench", "distributions", "recordings", "docs")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    text: str
    before: str
    """The line before the fence, stripped."""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")


def _scan(path: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """The fenced code blocks of a Markdown file, and its other lines (numbered from 1)."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            prose.append((index + 1, lines[index]))
            index += 1
            continue
        fence = opening.group(1)
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        assert end < len(lines), f"{path.relative_to(ROOT)}:{index + 1}: a code fence that is never closed"
        before = lines[index - 1].strip() if index > 0 else ""
        blocks.append(Block(path, index + 1, opening.group(2).lower(), "\n".join(lines[index + 1:end]) + "\n", before))
        index = end + 1
    return blocks, prose


def _without_indented_code(prose: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Prose lines without indented code blocks (4 spaces after a blank line), which hold no links."""
    kept: list[tuple[int, str]] = []
    in_code = False
    previous_blank = True
    for number, line in prose:
        if line.startswith("    ") and (previous_blank or in_code) and not line.lstrip().startswith(("-", "*")):
            in_code = True
        elif line.strip():
            in_code = False
        if not in_code:
            kept.append((number, line))
        previous_blank = not line.strip()
    return kept


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _links(path: Path) -> Iterator[tuple[int, str]]:
    _, prose = _scan(path)
    for number, line in _without_indented_code(prose):
        text = _CODE_SPAN.sub("", line)
        for match in _INLINE_LINK.finditer(text):
            yield number, match.group(1)
        if (reference := _REFERENCE_LINK.match(text)) is not None:
            yield number, reference.group(1)


def _relative_links(path: Path) -> Iterator[tuple[int, str]]:
    for number, target in _links(path):
        if not _SCHEME.match(target):
            yield number, target


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file (a repeated slug gets -1, -2... as on GitHub)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    _, prose = _scan(path)
    for _, line in _without_indented_code(prose):
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _blocks(*languages: str) -> list[Block]:
    return [block for path in FILES if path.exists() for block in _scan(path)[0] if block.language in languages]


def _merged(base: Mapping[str, Any], fragment: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in fragment.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def check_run_yaml(text: str, env: Mapping[str, str] = ENV) -> None:
    """Raise ConfigError (or yaml.YAMLError) unless `text` is a run.yaml, or a fragment of one, that
    the schema and its providers' config models accept."""
    document = yaml.safe_load(text)
    if not isinstance(document, dict):
        raise ConfigError(f"expected a mapping of run.yaml settings, got {type(document).__name__}")
    config = parse_config(_merged(BASE_DOCUMENT, document), env)
    for api_name, entries in config.providers.items():
        api = parse_api(api_name, ("providers", api_name))
        for index, entry in enumerate(entries):
            spec = load_spec(api, entry.provider_type)
            path = ("providers", api_name, index, "config")
            validate_model(spec.config_model, substitute(entry.config, env, path), path)


# Collected at import, so each block is a test of its own named by where it is.
YAML_BLOCKS = _blocks("yaml", "yml")
RUN_YAML_BLOCKS = [block for block in YAML_BLOCKS if block.before != NOT_RUN_YAML]
PYTHON_BLOCKS = _blocks("python", "py")
TOML_BLOCKS = _blocks("toml")


def test_the_files_are_there() -> None:
    assert README.is_file() and CONTRIBUTING.is_file()
    assert len(PAGES) >= 20, [page.name for page in PAGES]
    assert len(RUN_YAML_BLOCKS) >= 8 and len(PYTHON_BLOCKS) >= 5, "the scan found too few code blocks: is it still reading the fences?"


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings_that_exist(path: Path) -> None:
    broken: list[str] = []
    for number, target in _relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"line {number}: {target}: no such file ({resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"line {number}: {target}: no heading of {resolved.name} has the anchor #{anchor}")
    assert not broken, f"{path.relative_to(ROOT)}:\n" + "\n".join(broken)


def _pages_linked_from(path: Path) -> set[Path]:
    linked: set[Path] = set()
    for _, target in _relative_links(path):
        file_part = target.partition("#")[0]
        if file_part:
            resolved = (path.parent / file_part).resolve()
            if resolved.parent == DOCS.resolve():
                linked.add(resolved)
    return linked


def test_readme_links_every_docs_page_and_names_none_that_is_missing() -> None:
    linked = _pages_linked_from(README)
    pages = {page.resolve() for page in PAGES}
    assert not pages - linked, f"docs pages README.md does not link: {sorted(p.name for p in pages - linked)}"
    assert not linked - pages, f"pages README.md links that do not exist: {sorted(p.name for p in linked - pages)}"


def test_the_index_lists_every_other_page() -> None:
    index = DOCS / "index.md"
    others = {page.resolve() for page in PAGES if page.name != "index.md"}
    linked = _pages_linked_from(index)
    assert not others - linked, f"docs pages docs/index.md does not list: {sorted(p.name for p in others - linked)}"
    assert not linked - others - {index.resolve()}, f"pages docs/index.md lists that do not exist: {sorted(p.name for p in linked - others)}"


@pytest.mark.parametrize("block", RUN_YAML_BLOCKS, ids=lambda block: block.where)
def test_run_yaml_snippets_parse_with_the_config_model(block: Block) -> None:
    try:
        check_run_yaml(block.text)
    except (ConfigError, yaml.YAMLError) as error:
        pytest.fail(f"{block.where}: not a run.yaml the schema accepts (mark a block that is no run.yaml with "
                    f"{NOT_RUN_YAML} on the line before its fence):\n{error}")


def test_the_run_yaml_check_can_fail() -> None:
    """A misspelt key, a wrong type, an unknown provider, a provider config the provider refuses,
    an unset variable: each is refused, so a snippet that passes is one the server would take."""
    for wrong in (
        "server:\n  prot: 8321\n",
        "server:\n  port: high\n",
        "providers:\n  inference:\n    - {provider_id: x, provider_type: olama}\n",
        "providers:\n  inference:\n    - {provider_id: x, provider_type: vllm, config: {base_ur1: http://x}}\n",
        "providers:\n  inference:\n    - {provider_id: x, provider_type: vllm, config: {base_url: \"${env.NOT_SET_ANYWHERE}\"}}\n",
        "tool_runtime:\n  - {provider_id: mcp, provider_type: mcp}\n",
    ):
        with pytest.raises(ConfigError):
            check_run_yaml(wrong)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda block: block.where)
def test_python_snippets_parse(block: Block) -> None:
    try:
        tree = ast.parse(block.text, filename=block.where)
    except SyntaxError as error:
        pytest.fail(f"{block.where}: {error}")
    missing: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in PACKAGES:
            missing += [f"from {node.module} import {alias.name}" for alias in node.names if not _imports(f"{node.module}.{alias.name}")]
        elif isinstance(node, ast.Import):
            missing += [f"import {alias.name}" for alias in node.names if alias.name.split(".")[0] in PACKAGES and not _imports(alias.name)]
    assert not missing, f"{block.where}: the project has no such module or name: {missing}"


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=lambda block: block.where)
def test_toml_snippets_parse(block: Block) -> None:
    try:
        tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as error:
        pytest.fail(f"{block.where}: {error}")


def test_not_run_yaml_marks_a_yaml_block() -> None:
    """The mark excuses only the block right after it: a stray one would read as excusing something."""
    stray: list[str] = []
    for path in FILES:
        blocks, prose = _scan(path)
        marked_lines = {number for number, line in prose if line.strip() == NOT_RUN_YAML}
        fenced = {block.line - 1 for block in blocks if block.language in ("yaml", "yml")}
        stray += [f"{path.relative_to(ROOT)}:{number}" for number in sorted(marked_lines - fenced)]
    assert not stray, f"{NOT_RUN_YAML} not on the line before a ```yaml fence: {stray}"


_REPO_PATH = re.compile(r"^(?:%s)/[\w./-]*$" % "|".join(TOP_LEVEL))
_DOTTED = re.compile(r"^(?:%s)(?:\.\w+)+(?:\(\))?$" % "|".join(PACKAGES))


def _spans(path: Path) -> Iterator[tuple[int, str]]:
    _, prose = _scan(path)
    for number, line in prose:
        for match in _CODE_SPAN.finditer(line):
            yield number, match.group(2).strip()


def _imports(dotted: str) -> bool:
    parts = dotted.removesuffix("()").split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_paths_and_module_names_in_the_text_exist(path: Path) -> None:
    missing: list[str] = []
    for number, span in _spans(path):
        if _REPO_PATH.match(span) and not (ROOT / span).exists():
            missing.append(f"line {number}: `{span}`: no such file or directory")
        elif _DOTTED.match(span) and not _imports(span):
            missing.append(f"line {number}: `{span}`: no such module or attribute")
    assert not missing, f"{path.relative_to(ROOT)}:\n" + "\n".join(missing)


def test_slugs_are_githubs() -> None:
    assert slug("The `stack` command") == "the-stack-command"
    assert slug("run.yaml") == "runyaml"
    assert slug("Vector stores and file_search") == "vector-stores-and-file_search"
    assert slug("Coding agents: client tools, WebSocket mode, compaction") == "coding-agents-client-tools-websocket-mode-compaction"
    assert slug("Workers (`bench/workers.py`)") == "workers-benchworkerspy"
