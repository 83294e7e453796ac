"""The engine container: vLLM's and SGLang's flags for the knobs the operator owns, the user's args
passed through after them, probes and the preStop drain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infertune.api.flags import owned_flag
from infertune.api.spec import InferenceDeploymentSpec
from infertune.planner.types import Layout

# Seconds the pod keeps serving after it leaves the Service endpoints, so that in-flight streams
# finish and load balancers stop sending before the engine sees SIGTERM.
DRAIN_SECONDS = 30
# Grace after the drain: vLLM finishes running requests on SIGTERM; long agent answers need time.
TERMINATION_GRACE_SECONDS = 120


@dataclass(frozen=True)
class Flags:
    tp: str
    max_seqs: str
    memory: str
    model: str
    command: tuple[str, ...]


_FLAGS = {
    "vllm": Flags("--tensor-parallel-size", "--max-num-seqs", "--gpu-memory-utilization", "--model",
                  ("python3", "-m", "vllm.entrypoints.openai.api_server")),
    "sglang": Flags("--tp-size", "--max-running-requests", "--mem-fraction-static", "--model-path",
                    ("python3", "-m", "sglang.launch_server")),
}


def conflicting_args(spec: InferenceDeploymentSpec) -> list[str]:
    """User args that name a flag the operator owns (the models reject these; kept for defence)."""
    return [a for a in spec.engine.extra_args if owned_flag(spec.engine.kind, a) is not None]


def engine_command(spec: InferenceDeploymentSpec) -> list[str]:
    return list(_FLAGS[spec.engine.kind].command)


def engine_args(spec: InferenceDeploymentSpec, layout: Layout, multi_node: int = 1) -> list[str]:
    flags, engine = _FLAGS[spec.engine.kind], spec.engine
    args = [
        flags.model, spec.model.weights,
        flags.tp, str(layout.tensor_parallel_size),
        flags.max_seqs, str(layout.max_num_seqs),
        flags.memory, f"{engine.gpu_memory_utilization_percent / 100:.2f}",
        "--port", str(engine.port),
    ]
    if engine.kind == "sglang":
        args += ["--host", "0.0.0.0", "--enable-metrics"]
        if multi_node > 1:
            args += ["--nnodes", str(multi_node), "--node-rank", "$(LWS_WORKER_INDEX)",
                     "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000"]
    return args + list(engine.extra_args)


def probes(port_name: str, startup_seconds: int) -> dict[str, Any]:
    """Readiness and liveness on /health; a startup probe covers the model load so liveness does
    not kill a pod that is still reading a terabyte of weights."""
    def http() -> dict[str, Any]:  # a fresh dict each: shared ones come out as YAML anchors
        return {"httpGet": {"path": "/health", "port": port_name}}

    return {
        "startupProbe": {**http(), "periodSeconds": 10,
                         "failureThreshold": max(startup_seconds // 10, 1) + 6},
        "readinessProbe": {**http(), "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**http(), "periodSeconds": 15, "failureThreshold": 4},
    }


def pre_stop() -> dict[str, Any]:
    return {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {DRAIN_SECONDS}"]}}}
