"""The wheel the Dockerfile installs works on its own: built, installed into a clean venv, and run.

No Docker engine runs here, so this is the image's install path minus the base image. To keep it
fast the venv gets the project's already-installed dependencies through a .pth file, and the
wheel itself is installed with --no-deps; the test proves the import comes from the wheel, so
package data missing from it (the model catalogs) fails here, not in a cluster.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _run(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # What the Dockerfile's build stage runs.
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--wheel-dir", out, REPO, cwd=out)
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("infertune-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    created = _run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root.parent)
    assert created.returncode == 0, created.stderr
    python = root / "bin" / "python"
    installed = _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
                     wheel, cwd=root.parent)
    assert installed.returncode == 0, installed.stderr
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=root.parent).stdout.strip())
    # Dependencies only: the project's venv comes after the clean venv's own site-packages.
    (site / "zz_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def test_wheel_carries_the_package_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "infertune/py.typed" in names
    catalogs = [n for n in names if re.fullmatch(r"infertune/model/data/[^/]+\.toml", n)]
    assert catalogs, names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "benchmarks/", "charts/"))]


def test_wheel_holds_the_operator_not_its_lab(wheel: Path) -> None:
    """The twin, the demo and the benchmark are the lab's distribution: not in the operator's image."""
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert not [n for n in names if n.startswith(("infertune_lab/", "infertune/sim/", "infertune/demo/",
                                                   "infertune/bench/"))]
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    required = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    always = [r for r in required if "extra ==" not in r]
    assert always and not [r for r in always if r.split(">")[0].split("=")[0].strip() in ("matplotlib", "kmock")]


def test_installed_wheel_imports_from_itself_and_loads_its_catalogs(venv: Path) -> None:
    code = ("import infertune, infertune.model as m; print(infertune.__file__); "
            "print(m.load_model('kimi-k2.6').name); print(m.load_gpu('b200').name)")
    result = _run(venv / "bin" / "python", "-c", code, cwd=venv)
    assert result.returncode == 0, result.stderr
    origin, model, gpu = result.stdout.split("\n")[:3]
    assert origin.startswith(str(venv)), f"imported {origin}, not the wheel"
    assert "kimi" in model.lower() and "b200" in gpu.lower()


def test_console_script_reports_its_version(venv: Path) -> None:
    result = _run(venv / "bin" / "infertune", "--version", cwd=venv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "infertune 0.1.0"


def test_console_script_prints_the_crds(venv: Path) -> None:
    result = _run(venv / "bin" / "infertune", "crds", cwd=venv)
    assert result.returncode == 0, result.stderr
    printed = {d["metadata"]["name"]: d for d in yaml.safe_load_all(result.stdout) if d}
    expected = {d["metadata"]["name"]: d for p in sorted((REPO / "crds").glob("*.yaml"))
                for d in yaml.safe_load_all(p.read_text()) if d}
    assert printed == expected


def _locked() -> dict[str, tuple[str, int]]:
    """Package -> (pinned version, number of hashes) from requirements/operator.lock."""
    text = (REPO / "requirements" / "operator.lock").read_text()
    pins: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        found = re.match(r"([A-Za-z0-9_.-]+)==([^ \\;]+)", block)
        if found:
            name = re.sub(r"[-_.]+", "-", found.group(1)).lower()
            pins[name] = (found.group(2), block.count("--hash=sha256:"))
    return pins


def test_lock_pins_every_runtime_dependency_with_hashes() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = _locked()
    assert all(hashes for _, hashes in pins.values()), "every locked package needs --hash entries"
    for dep in map(Requirement, deps):
        name = re.sub(r"[-_.]+", "-", dep.name).lower()
        assert name in pins, f"{dep.name} is missing from requirements/operator.lock: run lock.sh"
        version = pins[name][0]
        assert dep.specifier.contains(version), f"lock pins {name}=={version}, outside {dep.specifier}"


def test_dockerfile_installs_only_locked_packages_and_runs_as_non_root() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert dockerfile.count("FROM ") >= 3  # build, deps, runtime
    runtime = dockerfile.rsplit("FROM ", 1)[1]
    assert "USER 65532:65532" in runtime and 'ENTRYPOINT ["infertune", "run"]' in runtime
    for line in re.findall(r"pip install[^\n]*", dockerfile):
        assert "--require-hashes" in line or "--no-deps /wheels/" in line, line
    ignored = (REPO / ".dockerignore").read_text()
    for source in re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.M):
        assert (REPO / source).exists(), source
        assert f"!{source}" in ignored or f"!{source}/" in ignored, f".dockerignore drops {source}"
