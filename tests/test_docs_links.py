"""Every relative link in the documentation leads somewhere: README.md, docs/**/*.md and
plugins/*/README.md are read, and each Markdown link or image that is not a URL must name
a file or folder that exists (relative to the page) and, with a ``#anchor``, a heading of
its target page as GitHub slugs it (or of the page itself for a bare ``#anchor``).
Links inside fenced code blocks and inline code are not links and are skipped."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Files a page may link to before they exist (written later); checked once they do.
EXPECTED_LATER = {ROOT / "ARCHITECTURE.md"}

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: ``[text](target)`` and ``![alt](target)``; the target may carry a "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def pages() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found += sorted(ROOT.glob("plugins/*/README.md"))
    return [page for page in found if page.is_file()]


def prose_lines(text: str, strip_code: bool = True) -> list[tuple[int, str]]:
    """``(line number, line)`` outside fenced code blocks, inline code removed unless
    ``strip_code`` is false (a heading's anchor keeps the text of its code)."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        lines.append((number, INLINE_CODE.sub("", line) if strip_code else line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: its rendered text (link targets, code marks
    and emphasis dropped) lower-cased, punctuation removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "")
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of ``page``'s headings, repeated ones numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8"), strip_code=False):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """One line per link of ``page`` that leads nowhere."""
    problems = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if EXTERNAL.match(target):
                continue
            where = f"{page.relative_to(root)}:{number}: {target}"
            path_part, _, anchor = target.partition("#")
            destination = (page.parent / path_part).resolve() if path_part else page
            if not destination.exists():
                if destination not in EXPECTED_LATER:
                    problems.append(f"{where}: no such file")
                continue
            if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                problems.append(f"{where}: no heading with anchor #{anchor}")
            elif anchor and destination.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not Markdown")
    return problems


def test_the_documentation_pages_are_found() -> None:
    names = {page.relative_to(ROOT).as_posix() for page in pages()}
    assert {"README.md", "docs/README.md", "docs/differences-from-triton.md"} <= names
    assert any(name.startswith("plugins/") for name in names)


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = [problem for page in pages() for problem in broken_links(page)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_links_into_docs() -> None:
    """The README is short and points onwards: the index and the differences page."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = {target for _, line in prose_lines(text) for target in LINK.findall(line)}
    assert {"docs/README.md", "docs/differences-from-triton.md"} <= targets
    assert "make test" in text  # CI runs the README's test command (.ci/run)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Differences from Triton", "differences-from-triton"),
        ("From one machine to Ray to Kubernetes", "from-one-machine-to-ray-to-kubernetes"),
        ("A model repository, step by step", "a-model-repository-step-by-step"),
        (
            "Triton's Python backend tests (`make triton-qa`)",
            "tritons-python-backend-tests-make-triton-qa",
        ),
        ("Protocols (HTTP and gRPC)", "protocols-http-and-grpc"),
        ("Metrics, statistics and tracing", "metrics-statistics-and-tracing"),
        (
            "**GPU** tensors and `FORCE_CPU_ONLY_INPUT_TENSORS`",
            "gpu-tensors-and-force_cpu_only_input_tensors",
        ),
        ("See [the guide](docs/x.md)", "see-the-guide"),
    ],
)
def test_github_slugs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_and_anchor_are_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Part one\n\n## Part one\n")
    page.write_text(
        "# Page\n\n[ok](other.md#part-one) [ok](other.md#part-one-1) [self](#page)\n"
        "[gone](missing.md) [bad](other.md#part-two) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n[web](https://example.com/x#y)\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 2, problems
    assert "missing.md: no such file" in problems[0]
    assert "no heading with anchor #part-two" in problems[1]
