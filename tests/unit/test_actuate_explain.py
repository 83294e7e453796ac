"""`infertune explain -f`: the recommended layout with its predictions and the rejected layouts' reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_explain_shows_the_choice_and_why_others_were_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-f", str(ROOT / "examples/kimi-k2.6-b200.yaml"),
                 "--policy", str(ROOT / "policies/coding-agent.yaml")]) == 0
    out = capsys.readouterr().out
    assert "recommended:  TP4 max-num-seqs" in out
    assert "OverKVHeadroom" in out  # past the headroom line is a named rejection
    assert "StreamTPSBelowSLO" in out  # so is missing the coding-agent 25 tok/s floor


def test_explain_needs_a_name_or_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 2
    assert "give NAME" in capsys.readouterr().err
