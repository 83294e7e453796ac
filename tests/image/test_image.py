"""`make image-test`: the built image, not the venv, runs what the chart renders. The chart tests of
tests/integration/test_chart_runs.py run again with the image as the pods' runtime (its entry point,
its user, the chart's read-only root file system and /tmp emptyDir), and the image's contents are
checked: no compiler, no pip, a non-root user.

Without `--image NAME` (plain `make test`) everything here is skipped: building the image takes a
few minutes and needs buildah (see the README for how long `make image-test` takes).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_fixture import Runtime
from tests.image.runtime import BuildahRuntime, buildah, image_config
from tests.integration.test_chart_runs import (  # noqa: F401 (collected here too, with the image's runtime)
    cluster,
    test_a_namespaced_operator_touches_nothing_outside_its_namespaces,
    test_ha_one_replica_acts_and_the_standby_takes_over_when_it_is_killed,
    test_the_images_default_command_runs_the_operator,
    test_the_readme_install_section_runs_word_for_word,
    test_what_the_chart_renders_runs,
)

pytestmark = [pytest.mark.image, pytest.mark.timeout(300)]
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "tcc", "as", "ld", "make")


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> str:
    name = request.config.getoption("--image")
    if not name:
        pytest.skip("needs --image NAME: `make image-test` builds the image and passes it")
    if shutil.which("buildah") is None:
        pytest.skip("needs buildah (make image-deps)")
    return str(name)


@pytest.fixture
def runtime(image: str) -> Runtime:
    return BuildahRuntime(image)


@contextlib.contextmanager
def root_of(image: str) -> Iterator[tuple[str, Path]]:
    """A working container of the image and its root file system, removed afterwards."""
    name = buildah("from", "--pull-never", image)
    try:
        yield name, Path(buildah("mount", name))
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True)


def run_in(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["buildah", "run", "--isolation", "chroot", "--network", "host", name, "--", *argv],
                          capture_output=True, text=True, timeout=60)


def test_the_image_runs_as_a_non_root_user(image: str) -> None:
    config = image_config(image)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["infertune", "run"]
    with root_of(image) as (name, _):
        assert run_in(name, "id", "-u").stdout.strip() == "65532"


def test_the_image_holds_no_compiler_and_no_pip(image: str) -> None:
    with root_of(image) as (name, root):
        found = [str(p.relative_to(root)) for d in ("usr/bin", "usr/local/bin", "opt/infertune/bin", "bin")
                 for p in (root / d).glob("*") if p.name in COMPILERS or p.name.startswith(("gcc-", "pip"))
                 or p.name.endswith(("-gcc", "-g++", "-ld", "-as"))]
        assert not found, found
        wheels = [str(p.relative_to(root)) for p in root.glob("usr/share/python-wheels/*")]
        site = [str(p.relative_to(root)) for p in root.glob("opt/infertune/lib/python3*/site-packages/*")
                if p.name.split("-")[0] in ("pip", "setuptools", "wheel")]
        assert not wheels and not site, wheels + site
        for python in ("python3", "/opt/infertune/bin/python"):
            answer = run_in(name, python, "-m", "pip", "--version")
            assert answer.returncode != 0 and "No module named pip" in answer.stderr, answer


def test_the_operator_starts_on_a_read_only_root_with_only_tmp_writable(image: str, tmp_path: Path) -> None:
    """The chart's securityContext (readOnlyRootFilesystem, /tmp an emptyDir), outside a cluster:
    `infertune run --help` imports everything the operator imports, and nothing else is writable."""
    pod = {"securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
           "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]}
    probe = ("import infertune.commands.run, infertune.controller, kopf, pathlib; "
             "pathlib.Path('/tmp/ok').write_text('1'); "
             "pathlib.Path('/opt/infertune/x').write_text('1')")
    container = {"name": "c", "command": ["python", "-c", probe],
                 "securityContext": {"readOnlyRootFilesystem": True},
                 "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    runtime = BuildahRuntime(image)
    netns = f"infertune-ro-{tmp_path.name[-8:]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        argv = runtime.argv("ro", netns, pod, container, {}, {})
        answer = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        runtime.release("ro")
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
    assert "Read-only file system" in answer.stderr, answer.stderr[-2000:]
    assert "/tmp/ok" not in answer.stderr  # /tmp took the write; the root refused the next one
