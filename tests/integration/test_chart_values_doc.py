"""values.yaml documents every value, and docs/install.md's values reference is generated from it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.integration.chart_support import CHART, VALUES_DOC, render_files

pytestmark = pytest.mark.integration


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("values_doc", CHART / "hack" / "values_doc.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_every_value_is_documented() -> None:
    assert _generator().undocumented((CHART / "values.yaml").read_text()) == []


def test_generator_finds_nested_values_and_their_defaults() -> None:
    gen = _generator()
    text = "# -- top\na: 1\nb:\n  # -- nested\n  # over two lines\n  c: [x]\n  d: 2\n"
    assert [(e.path, e.default, e.description) for e in gen.entries(text)] == [
        ("a", 1, "top"), ("b.c", ["x"], "nested over two lines")]
    assert gen.undocumented(text) == ["b.d"]


def test_values_reference_is_in_sync() -> None:
    gen = _generator()
    page = VALUES_DOC.read_text()
    expected = gen.replace_block(page, gen.table((CHART / "values.yaml").read_text()))
    assert page == expected, "run `python charts/infertune/hack/values_doc.py --write docs/install.md`"


def test_install_page_quotes_the_real_notes() -> None:
    notes = render_files()["infertune/templates/NOTES.txt"]
    page = VALUES_DOC.read_text()
    quoted = page.split("NOTES, rendered with the default values):\n\n```text\n", 1)[1]
    excerpt = quoted.split("   ...\n", 1)[0]
    assert notes.startswith(excerpt)
