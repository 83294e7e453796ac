"""Public data the lab replays, shipped with it (README.md here names the sources and licences)."""

from __future__ import annotations

from pathlib import Path

AZURE_CODE_TRACE = Path(__file__).resolve().parent / "azure-llm-inference-trace-2023-code.csv"
