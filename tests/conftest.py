"""Shared pytest options: `--kube` opts into the suite that runs against the cluster in KUBECONFIG;
`--image NAME` runs tests/image against a built image (make image-test)."""

from __future__ import annotations

import pytest

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
