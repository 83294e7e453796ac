"""A reader who follows a link in the README or docs/ lands on a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A markdown link's target: skip web addresses (scheme:), mail and anchors within the page.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _local_targets(page: Path) -> list[str]:
    targets = [m.group(1) for m in LINK.finditer(page.read_text())]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_from_its_own_page(page: Path) -> None:
    missing = [t for t in _local_targets(page) if not (page.parent / t.split("#")[0]).exists()]
    assert missing == [], f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"
