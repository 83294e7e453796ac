"""Observations and fits as plain JSON-able dicts (for `infertune observe --output json` and status)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from infertune.api.observation import Observation
from infertune.model.fit import LinearFit


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def observation_to_dict(obs: Observation) -> dict[str, Any]:
    data = dataclasses.asdict(obs)
    data["fault"] = obs.fault.value
    data["fit_samples"] = [list(s) for s in obs.fit_samples]
    return dict(_clean(data))


def fit_to_dict(fit: LinearFit) -> dict[str, Any]:
    return {"intercept_ms": round(fit.intercept_s * 1e3, 4), "slope_ms_per_seq": round(fit.slope_s * 1e3, 4),
            "r2": round(fit.r2, 4), "samples": fit.samples,
            "batch_min": fit.batch_min, "batch_max": fit.batch_max}
