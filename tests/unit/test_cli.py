"""The command line as a whole: the lab's commands, present or not."""

from __future__ import annotations

import importlib.metadata

import pytest

from infertune import cli


def test_lab_commands_come_from_the_lab_distribution() -> None:
    modules = cli.command_modules()
    assert {"infertune_lab.commands.demo", "infertune_lab.commands.bench", "infertune_lab.commands.simulate"} <= set(
        modules)
    assert "infertune.commands.run" in modules


def test_without_the_lab_its_commands_name_the_package_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])
    assert cli.main(["demo", "--fast"]) == 2
    err = capsys.readouterr().err
    assert "pip install infertune-lab" in err and "Traceback" not in err
    assert cli.main(["crds"]) == 0  # the operator's own commands still work


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after `code` (this process has imported everything already)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_a_command_imports_only_itself() -> None:
    """`infertune plan` answered after seconds of importing bench, demo and run (matplotlib, kopf, the
    Kubernetes client) before reading its first flag (`make bench BENCH=cli_startup`)."""
    loaded = _modules_after("from infertune.cli import build_parser\n"
                            "build_parser(['plan', '-f', 'x.yaml']).parse_args(['plan', '-f', 'x.yaml'])")
    assert not {"infertune_lab.bench", "infertune_lab.demo", "kopf", "kubernetes", "matplotlib"} & loaded
    assert "infertune.commands.plan" in loaded


def test_every_command_is_listed_where_none_or_an_unknown_one_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nosuch"]) == 2
    err = capsys.readouterr().err
    for name in ("bench", "crds", "demo", "explain", "fit", "observe", "plan", "render", "run", "simulate"):
        assert f"'{name}'" in err
    for top_help in (["--help"], ["-h", "plan"]):
        assert cli.main(top_help) == 0
        assert "simulate" in capsys.readouterr().out
