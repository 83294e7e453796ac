"""The performance model: catalogs, KV capacity, the seed-000 napkin chain, the online fit, derived figures.

Pure functions over frozen dataclasses. No I/O beyond reading the catalogs shipped in the package,
no clock. Units are SI: bytes, seconds, tokens, FLOP.
"""

from infertune.model.catalog import (
    CatalogError,
    GpuSpec,
    ModelProfile,
    MoeSpec,
    gpu_names,
    load_gpu,
    load_model,
    model_names,
)
from infertune.model.fit import FitError, LinearFit, fit_per_pass
from infertune.model.hf_config import ConfigError, profile_from_hf_config
from infertune.model.kv import (
    CapacityAssumptions,
    cliff_concurrency,
    kv_bytes_per_token,
    kv_capacity_tokens,
    safe_concurrency,
    weight_bytes,
    working_set_tokens,
)
from infertune.model.passfit import PassFit, PassPrior, SampleSet, fit_pass
from infertune.model.perf import (
    LayoutPrediction,
    PassPrediction,
    PerformanceModel,
    Region,
    cost_per_million,
)
from infertune.model.roofline import NapkinAssumptions, PassBytes, napkin_per_pass, pass_bytes, unique_experts
from infertune.model.workload import WORKLOADS, Workload, workload_preset

__all__ = [
    "WORKLOADS",
    "CapacityAssumptions",
    "CatalogError",
    "ConfigError",
    "FitError",
    "GpuSpec",
    "LayoutPrediction",
    "LinearFit",
    "ModelProfile",
    "MoeSpec",
    "NapkinAssumptions",
    "PassBytes",
    "PassFit",
    "PassPrediction",
    "PassPrior",
    "PerformanceModel",
    "Region",
    "SampleSet",
    "Workload",
    "cliff_concurrency",
    "cost_per_million",
    "fit_pass",
    "fit_per_pass",
    "gpu_names",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "load_gpu",
    "load_model",
    "model_names",
    "napkin_per_pass",
    "pass_bytes",
    "profile_from_hf_config",
    "safe_concurrency",
    "unique_experts",
    "weight_bytes",
    "working_set_tokens",
    "workload_preset",
]
