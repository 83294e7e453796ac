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
