"""The README and the docs site speak to users: short README, no work narration, no citations of files outside the
repository, every `docs/<page>.md#anchor` a citation names exists, and the generated parameters page is current."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
import unicodedata
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
GENERATED_PAGES = ("parameters.md", "reproduction.md")  # written by code; the code is checked, not the page
HEADLINE = ("<!-- memrepro:headline:start -->", "<!-- memrepro:headline:end -->")
ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
            "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|\\d+(?:st|nd|rd|th)")
# What users must never read: paths outside the repository, tracker references, and the history of the work
# ("the sixth session", "this session", "a machine shared by four sessions"). A LongMemEval haystack session is
# data and stays allowed.
FORBIDDEN = re.compile("|".join((
    r"\.\./shared", r"shared/specs", r"\bissues?\s*#\s*\d*", r"\bissue\s+\d+",
    r"\bspecs?\b\s*(?:\w+\.md\s*)?§", r"\bthe spec\b", r"\bspec's\b", r"(?-i:\bSpec:)",
    rf"\b(?:this|last|previous|earlier|next|{ORDINALS})\s+session(?:'s)?\b(?!\s+of\b)",
    r"\bsessions?\s+(?:shared|ago)\b", r"\bshared\s+(?:by|with)\s+\w+\s+(?:other\s+)?sessions\b",
    r"\bsession'?s?\s+(?:cpu|load|budget|machine)\b",
)), re.IGNORECASE)
# Code cites the docs as docs/<page>.md#<anchor>; a bare spec file name or a section sign is a citation of a file
# outside the repository (papers are cited by name: "Appendix D.8", "CMR App. A").
BARE_SPEC = re.compile(r"(?<!docs/)\b(?:datasets|protocols|retrievers|models|architecture)\.md\b|§")
CITATION = re.compile(r"\bdocs/([a-z][a-z-]*)\.md(?:#([\w-]+))?")  # our pages are lower-case


# ------------------------------------------------------------------------------------------------------ helpers

def _hand_written_pages() -> list[Path]:
    return [p for p in sorted(DOCS.glob("*.md")) if p.name not in GENERATED_PAGES]


def _python_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    source = path.read_text(encoding="utf-8")
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                found.append((first.lineno, first.value.value))
    return found


def _comment_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment of a YAML or shell file."""
    return [(number, match.group(1)) for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if (match := re.search(r"(?:^|\s)#(.*)$", line))]


def _code_prose() -> list[tuple[str, int, str]]:
    """Comments and docstrings of the code users read: the package, the configs, the scripts and the examples."""
    out: list[tuple[str, int, str]] = []
    for root in ("memrepro", "scripts", "examples", "hydra_plugins"):
        for path in sorted((REPO / root).rglob("*.py")):
            out += [(str(path.relative_to(REPO)), line, text) for line, text in _python_prose(path)]
    yaml_files = [*sorted((REPO / "conf").rglob("*.yaml")), *sorted((REPO / "memrepro" / "reference").glob("*.yaml"))]
    for path in [*yaml_files, *sorted((REPO / "scripts").glob("*.sh"))]:
        out += [(str(path.relative_to(REPO)), line, text) for line, text in _comment_prose(path)]
    # config values are shown too (experiments --list: costs), and so are the reference files' sources and metrics
    for path in [*sorted((REPO / "conf").rglob("*.yaml")), *sorted((REPO / "memrepro" / "reference").glob("*.yaml"))]:
        out += [(str(path.relative_to(REPO)), 0, text) for text in _strings(yaml.safe_load(path.read_text("utf-8")))]
    return out


def _strings(node) -> list[str]:
    if isinstance(node, dict):
        return [text for value in node.values() for text in _strings(value)]
    if isinstance(node, list):
        return [text for value in node for text in _strings(value)]
    return [node] if isinstance(node, str) else []


def slug(heading: str) -> str:
    """Python-Markdown's toc slug (what mkdocs gives a heading's anchor)."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)  # no code blocks
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_parameters_doc", REPO / "scripts" / "gen_parameters_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------------ README

def test_readme_is_short_and_holds_the_headline_block_once() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    start, end = (text.count(marker) for marker in HEADLINE)
    assert (start, end) == (1, 1) and text.index(HEADLINE[0]) < text.index(HEADLINE[1])


@pytest.mark.parametrize("path", [README, *_hand_written_pages()], ids=lambda p: p.name)
def test_hand_written_pages_tell_no_history(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not FORBIDDEN.search(text), FORBIDDEN.search(text).group(0)
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date: say what is, not when it was measured"
    assert not re.search(r"\b[0-9a-f]{16}\b", text), "a run id or recipe hash: the generated pages show runs"


def test_readme_links_into_existing_docs() -> None:
    for target in re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8")):
        assert (REPO / target).is_file(), target


# ------------------------------------------------------------------------------------------------------ code

def test_code_comments_and_docstrings_cite_the_docs_not_outside_files() -> None:
    bad = [f"{path}:{line}: {match.group(0)!r}" for path, line, text in _code_prose()
           for pattern in (FORBIDDEN, BARE_SPEC) if (match := pattern.search(text))]
    assert bad == [], "\n".join(bad)


def test_every_docs_citation_resolves() -> None:
    """docs/<page>.md#<anchor> in the code, the configs, the README and the docs names a page and heading that exist."""
    texts = [(f"{path}:{line}", text) for path, line, text in _code_prose()]
    texts.append(("README.md", README.read_text(encoding="utf-8")))
    texts += [(p.name, p.read_text(encoding="utf-8")) for p in _hand_written_pages()]
    known = {p.stem: anchors(p) for p in DOCS.glob("*.md")}
    broken = [f"{where}: docs/{page}.md#{anchor or ''}" for where, text in texts
              for page, anchor in CITATION.findall(text)
              if page not in known or (anchor and anchor not in known[page])]
    assert broken == [], "\n".join(broken)


def test_forbidden_patterns_catch_what_they_are_for() -> None:
    for narration in ("as the sixth session found", "measured this session", "issue #12 §3", "(issue 15 §4)",
                      "see ../shared/specs/protocols.md §1.5", "spec retrievers.md §3", "spec §5",
                      "on a machine shared by four sessions", "what one session's CPU allowed",
                      "the diagnostics the spec asks for", "Spec: the gate"):
        assert FORBIDDEN.search(narration) or BARE_SPEC.search(narration), narration
    assert BARE_SPEC.search("The familiarity gate (§2)")
    for fine in ("one memory per haystack session", "turns of the same session", "the first session of conv-26",
                 "docs/protocols.md#tie-rule", "session_user", "sessions whose id contains answer",
                 "# a top-level spec: finds the package"):
        assert not FORBIDDEN.search(fine) and not BARE_SPEC.search(fine), fine
    assert slug("LoCoMo gold evidence") == "locomo-gold-evidence" and slug("`retriever=` options") == "retriever-options"


# ------------------------------------------------------------------------------------------------------ site

def test_parameters_page_is_current() -> None:
    """docs/parameters.md is generated from the schema: regenerate it with `make docs` after a config change."""
    fresh = _load_generator().render()
    assert (DOCS / "parameters.md").read_text(encoding="utf-8") == fresh, \
        "docs/parameters.md is stale: run `make docs` (or python scripts/gen_parameters_doc.py)"


def test_parameters_page_lists_every_schema_key_with_its_range() -> None:
    from memrepro.config import RunConfig
    from memrepro.retrievers.rfmem.params import GateParams, RecollectionParams

    page = (DOCS / "parameters.md").read_text(encoding="utf-8")
    for name in RecollectionParams.__dataclass_fields__:
        assert f"| `retriever.recollection.{name}` |" in page, name
    for name in GateParams.__dataclass_fields__:
        assert f"| `retriever.gate.{name}` |" in page, name
    for name in RunConfig.__dataclass_fields__:
        assert re.search(rf"\| `{name}(\.\w+)*` \|", page), name
    # the ranges are the declared rules' own words
    assert "| `retriever.recollection.alpha` | float | `0.8` | a number in [0, 1] |" in page
    assert "| `runtime.batch_size` | int | `1024` | an integer >= 1 |" in page


def test_mkdocs_nav_lists_every_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["theme"]["name"] == "material"
    nav = {next(iter(item.values())) for item in config["nav"]}
    # and the report, built into docs/report by `make docs` (opened from disk: page.html, no directory URLs)
    assert nav - {p.name for p in DOCS.glob("*.md")} == {"report/index.html"}
    assert {p.name for p in DOCS.glob("*.md")} <= nav and config["use_directory_urls"] is False
