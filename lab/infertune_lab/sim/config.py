"""What one simulated replica is: the engine flags a vLLM pod carries, plus how its step time is modelled.

`ReplicaConfig` mirrors the flags the operator renders (`--tensor-parallel-size`, `--max-num-seqs`,
`--max-num-batched-tokens`, `--gpu-memory-utilization`, `--num-gpu-blocks-override`), so a fleet
agent can build one straight from a pod's arguments with `ReplicaConfig.from_args`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infertune.errors import UserError
from infertune.model import (
    CapacityAssumptions,
    LinearFit,
    PerformanceModel,
    load_gpu,
    load_model,
    workload_preset,
)

ENGINES = ("vllm", "sglang")

# Flag -> (field, type). Unknown flags are ignored: a real pod carries many we do not model.
_FLAGS: dict[str, tuple[str, type]] = {
    "--tensor-parallel-size": ("tp", int),
    "-tp": ("tp", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--block-size": ("block_size", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--num-gpu-blocks-override": ("num_gpu_blocks", int),
    "--served-model-name": ("served_model_name", str),
}


@dataclass(frozen=True)
class ReplicaConfig:
    """One replica's layout and engine settings. `perf` overrides the catalog-built model."""

    model: str = "kimi-k2.6"
    gpu: str = "b200"
    tp: int = 8
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.90
    engine: str = "vllm"
    workload: str = "coding-agent"  # the traffic the step-time model is referenced to
    fits: Mapping[int, LinearFit] = field(default_factory=dict)
    measured_points: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    noise: float = 0.0  # relative std-dev of one step's time
    load_delay_seconds: float = 0.0
    served_model_name: str = ""
    perf: PerformanceModel | None = None
    # Prefill tokens/s of this replica, calibrated on measurements (model/prefillfit.py); None steps prefill at
    # the performance model's napkin rate.
    prefill_tokens_per_second: float | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.tp >= 1, "tp must be >= 1"),
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.block_size >= 1, "block_size must be >= 1"),
            (self.num_gpu_blocks is None or self.num_gpu_blocks >= 1, "num_gpu_blocks must be >= 1"),
            (0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization must be in (0, 1]"),
            (self.engine in ENGINES, f"engine must be one of {', '.join(ENGINES)}"),
            (self.noise >= 0, "noise must be >= 0"),
            (self.load_delay_seconds >= 0, "load_delay_seconds must be >= 0"),
            (self.prefill_tokens_per_second is None or (math.isfinite(self.prefill_tokens_per_second)
                                                        and self.prefill_tokens_per_second > 0),
             "prefill_tokens_per_second must be a finite positive number"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model

    def performance_model(self) -> PerformanceModel:
        if self.perf is not None:
            return self.perf
        return PerformanceModel(
            load_model(self.model), load_gpu(self.gpu), workload_preset(self.workload),
            capacity=CapacityAssumptions(gpu_memory_utilization=self.gpu_memory_utilization),
            fits=dict(self.fits), measured_points=dict(self.measured_points),
        )

    def gpu_blocks(self) -> int:
        """The KV pool in blocks: given, or the capacity model's tokens over the block size."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        blocks = int(self.performance_model().kv_capacity(self.tp) // self.block_size)
        if blocks < 1:
            raise UserError(f"{self.model} does not fit on {self.tp}x {self.gpu}: no KV blocks left")
        return blocks

    def with_(self, **changes: object) -> ReplicaConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @staticmethod
    def from_args(args: Sequence[str], base: ReplicaConfig | None = None) -> ReplicaConfig:
        """Reads the engine flags of a pod's command line (`--flag value` or `--flag=value`)."""
        changes: dict[str, object] = {}
        items = list(args)
        i = 0
        while i < len(items):
            flag, _, inline = items[i].partition("=")
            if flag in _FLAGS:
                name, kind = _FLAGS[flag]
                if inline:
                    raw = inline
                elif i + 1 < len(items):
                    i += 1
                    raw = items[i]
                else:
                    raise UserError(f"{flag} needs a value")
                try:
                    changes[name] = kind(raw)
                except ValueError:
                    raise UserError(f"{flag}: {raw!r} is not a valid {kind.__name__}") from None
            i += 1
        return (base or ReplicaConfig()).with_(**changes)
