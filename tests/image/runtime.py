"""The built image as the container runtime of tests/cluster_fixture.py's kubelet: each pod is a
buildah working container run with `buildah run --isolation chroot` (podman run fails here on crun's
rlimits), in the pod's network namespace, as the pod's user, with its emptyDir volumes as tmpfs and,
when its securityContext says so, a read-only root file system.

buildah's chroot isolation has no read-only root and no network namespace of its own, so each pod
runs in a private mount namespace (unshare) inside its network namespace (ip netns exec) where the
container's root is re-mounted read-only; a 1 MiB tmpfs on /run holds buildah's own bookkeeping
(its cleanup fails on a read-only /run). That mount namespace is the pod's alone: the node and the
other pods still see the container's root as buildah made it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster_fixture import container_argv

Obj = dict[str, Any]


def buildah(*args: str) -> str:
    done = subprocess.run(["buildah", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def image_config(image: str) -> Obj:
    """The image's OCI config: Entrypoint, Cmd, Env, User, WorkingDir."""
    config: Obj = json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
    return config


@dataclass
class BuildahRuntime:
    image: str
    containers: dict[str, str] = field(default_factory=dict)  # pod -> working container

    def argv(self, pod: str, netns: str, spec: Obj, container: Obj, env: Mapping[str, str],
             mounts: Mapping[str, str]) -> list[str]:
        config = image_config(self.image)
        argv = container_argv(container, list(config.get("Entrypoint") or []), list(config.get("Cmd") or []))
        name = buildah("from", "--pull-never", "--name", f"infertune-test-{pod}", self.image)
        self.containers[pod] = name
        root = Path(buildah("mount", name))
        options = ["--isolation", "chroot", "--network", "host"]
        security = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
        if "runAsUser" in security:
            options += ["--user", f"{security['runAsUser']}:{security.get('runAsGroup', security['runAsUser'])}"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            assert "emptyDir" in volume, f"the runtime stand-in mounts emptyDir volumes only, not {volume}"
            size = (volume["emptyDir"] or {}).get("sizeLimit", "64Mi").replace("Mi", "m")
            options += ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-size={size}"]
        for source, target in mounts.items():
            (root / target.lstrip("/")).mkdir(parents=True, exist_ok=True)  # made before the root is read-only
            options += ["--volume", f"{source}:{target}:ro"]
        for key, value in env.items():
            options += ["--env", f"{key}={value}"]
        run = shlex.join(["buildah", "run", *options, name, "--", *argv])
        steps = [f"mount --bind {shlex.quote(str(root))} {shlex.quote(str(root))}"]
        if security.get("readOnlyRootFilesystem"):
            steps.append(f"mount -o remount,bind,ro {shlex.quote(str(root))}")
        steps += [f"mount -t tmpfs -o size=1m,mode=755 tmpfs {shlex.quote(str(root / 'run'))}", f"exec {run}"]
        return ["ip", "netns", "exec", netns, "unshare", "--mount", "--propagation", "private",
                "sh", "-ec", "\n".join(steps)]

    def visible_path(self, node_path: Path, mount_point: str) -> str:
        return f"{mount_point}/{node_path.name}"

    def release(self, pod: str) -> None:
        name = self.containers.pop(pod, None)
        if name is not None:
            subprocess.run(["buildah", "rm", name], capture_output=True)
