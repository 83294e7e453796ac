"""The demo compresses time. What delays a scale-up (its cooldown, the rate window's lag) must not be
compressed less than the model load, or the demo measures a lag that production does not have and
climbs a spike one pod per load (docs/demo.md, "Time is compressed")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infertune.api.quantities import parse_duration
from infertune_lab.demo.run import profile

ROOT = Path(__file__).resolve().parents[2]
# Production's ratio: the example's model load, and the scale-up cooldown of the policy it names.
EXAMPLE = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())["spec"]
POLICY = yaml.safe_load((ROOT / f"policies/{EXAMPLE['policyRef']['name']}.yaml").read_text())["spec"]
REAL_LOAD_S = float(EXAMPLE["engine"]["startupSeconds"])
REAL_SCALE_UP_S = parse_duration(POLICY["tuning"]["cooldowns"]["scaleUp"])


@pytest.mark.parametrize("fast_run", [False, True])
def test_a_scale_up_waits_no_longer_against_the_load_than_in_production(fast_run: bool) -> None:
    compression = profile(fast_run).compression
    load = float(compression.startup_seconds)
    cooldown, interval = parse_duration(compression.scale_up), parse_duration(compression.interval)
    # As short as a cooldown can be (one tuning interval), or production's share of a load.
    assert cooldown <= max(interval, load * REAL_SCALE_UP_S / REAL_LOAD_S)


def test_the_demos_demand_reading_lags_a_small_part_of_a_load() -> None:
    p = profile(fast_run=False)
    lag = parse_duration(p.settings.window) / 2  # rate() over a window reads its middle
    assert lag <= 0.25 * p.compression.startup_seconds
