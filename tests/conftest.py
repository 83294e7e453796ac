"""Shared pytest options: `--kube` opts into the suite that runs against the cluster in KUBECONFIG;
`--image NAME` runs tests/image against a built image (make image-test)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests import fuzz_tally

# `HYPOTHESIS_PROFILE=fuzz` runs the fuzz tests (tests/unit/test_fuzz.py) at ten times their examples,
# as docs/reliability.md reports them; the default keeps `make test` within its budget.
settings.register_profile("default", deadline=None)
settings.register_profile("fuzz", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The real Prometheus and the canned scrape targets, for any test that asks for them by name.
pytest_plugins = ["tests.prometheus_fixture"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kube", action="store_true", default=False,
                     help="run the opt-in suite against the real cluster in KUBECONFIG")
    parser.addoption("--image", default=None, metavar="NAME",
                     help="the built operator image tests/image runs (make image-test passes it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--kube"):
        return
    skip = pytest.mark.skip(reason="needs --kube and a real cluster in KUBECONFIG")
    for item in items:
        if "kube" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    fuzz_tally.write()
