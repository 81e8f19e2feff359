"""The user docs (docs/, README.md) and the benchmark log (bench/log/) speak about the product: no
internal issue numbers, and every relative link leads to a file and heading that exist, so a reader
who follows one never lands on nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ISSUE = re.compile(r"[Ii]ssues? [0-9]+")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def worded_files() -> list[Path]:
    """Every page that must not name an internal issue."""
    return sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "bench" / "log").glob("*.md")])


def linked_files() -> list[Path]:
    """Every page whose relative links must resolve."""
    return worded_files()


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link or heading inside one is only an example)."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lowercased, punctuation but '-' and '_'
    dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page's headings give, repeated headings numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    out.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return out


def links(text: str) -> list[str]:
    """The relative link targets of a page's prose (inline code spans left out)."""
    out: list[str] = []
    for line in prose(text):
        line = re.sub(r"`[^`]*`", "", line)
        out.extend(m.group(1) for m in LINK.finditer(line))
    return [t for t in out if not SCHEME.match(t) and not t.startswith("/")]


def broken(page: Path, target: str) -> str | None:
    """Why a link of `page` leads nowhere, or None when its file (and heading) exist."""
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{target}: no file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
        return f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}"
    return None


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("The handoff", "the-handoff"),
        ("Pods at a steady rate: 20 new pods a second", "pods-at-a-steady-rate-20-new-pods-a-second"),
        ("The operator's hot path, replayed: `bench/replay.py`", "the-operators-hot-path-replayed-benchreplaypy"),
        ("Queued pods (Slurm starts them from its queue)", "queued-pods-slurm-starts-them-from-its-queue"),
        ("CompositePodGroups (Kubernetes 1.37)", "compositepodgroups-kubernetes-137"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("A [linked](x.md) word", "a-linked-word"),
    ],
)
def test_a_heading_gets_githubs_anchor(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_a_repeated_heading_is_numbered_and_code_blocks_give_none() -> None:
    text = "# Runs\n## Runs\n```sh\n# not a heading\n```\n## Runs\n"
    assert anchors(text) == {"runs", "runs-1", "runs-2"}


def test_links_skip_code_and_other_schemes() -> None:
    text = "[a](a.md#x) `[b](b.md)` [c](https://example.com) ![d](img/d.png)\n```\n[e](e.md)\n```\n"
    assert links(text) == ["a.md#x", "img/d.png"]


@pytest.mark.parametrize("page", worded_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_page_names_no_internal_issue(page: Path) -> None:
    lines = enumerate(page.read_text().splitlines(), 1)
    hits = [f"{n}: {line.strip()[:120]}" for n, line in lines if ISSUE.search(line)]
    assert not hits, "say what changed and why (a date is fine), not the issue:\n" + "\n".join(hits)


@pytest.mark.parametrize("page", linked_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    problems = [p for t in links(page.read_text()) if (p := broken(page, t))]
    assert not problems, "\n".join(problems)


def test_the_benchmark_log_indexes_every_entry() -> None:
    log = REPO / "bench" / "log"
    listed = set(links((log / "README.md").read_text()))
    entries = {p.name for p in log.glob("*.md") if p.name != "README.md"}
    assert entries and entries <= listed


def test_the_architecture_map_stays_a_map() -> None:
    """docs/architecture.md is the newcomer's map (components, floors, flows, where each concern
    lives); protocols and internals live in docs/design/, one page per concern, each linked from it."""
    page = REPO / "docs" / "architecture.md"
    text = page.read_text()
    assert len(text.splitlines()) <= 400, "move the detail into a page of docs/design/ and link it"
    linked = {(page.parent / t.partition("#")[0]).resolve() for t in links(text)}
    design = sorted((REPO / "docs" / "design").glob("*.md"))
    assert design and not [p.name for p in design if p.resolve() not in linked], "link each design page from the map"


# Where code, charts, scripts and configuration name a page of docs/ ("docs/colocation.md",
# "docs/design/processes.md#stopping"): top-level folders of the project that may hold such names.
NAMING_DIRS = [
    ".ci",
    "bench",
    "crds",
    "examples",
    "extender",
    "hack",
    "helm",
    "operator",
    "slurm-hooks",
    "slurm_bridge",
    "tests",
    "webhook",
]
NAMING_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".json", ".txt", ".tpl", ".conf", ".env", ".md", ".toml", ".go"}
DOC_NAME = re.compile(r"(?<![\w/.])(?:\.\./)*(docs/[\w/-]+\.md)(?:#([\w-]+))?")


def naming_files() -> list[Path]:
    """The project's files outside docs/ that may name a docs page (build outputs and caches left out)."""
    found = [REPO / "Dockerfile", REPO / "pyproject.toml"]
    for top in NAMING_DIRS:
        found += [p for p in (REPO / top).rglob("*") if p.suffix in NAMING_SUFFIXES and "__pycache__" not in p.parts]
    return sorted(p for p in found if p.is_file())


def test_every_docs_page_the_code_names_exists_with_its_heading() -> None:
    """A page moved or a heading renamed leaves no comment, chart description or message pointing
    at nothing: each `docs/<page>.md` named outside docs/ exists, and each `#anchor` is a heading of it."""
    pages: dict[Path, set[str]] = {}
    problems: list[str] = []
    for f in naming_files():
        for m in DOC_NAME.finditer(f.read_text(errors="replace")):
            page = REPO / m.group(1)
            if not page.is_file():
                problems.append(f"{f.relative_to(REPO)}: no {m.group(1)}")
            elif m.group(2) and m.group(2) not in pages.setdefault(page, anchors(page.read_text())):
                problems.append(f"{f.relative_to(REPO)}: no heading #{m.group(2)} in {m.group(1)}")
    assert not problems, "\n".join(problems)
