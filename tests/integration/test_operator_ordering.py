"""Ordering and ownership with the real operator (kopf) on kmock's emulated API server: `kubectl apply`
of a resource before its ServingPolicy, a policy deleted while in use, and a Deployment of the same
name that infertune did not create."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.test_operator_lifecycle import (
    DEPLOY,
    INFD,
    NS,
    SVPOL,
    condition,
    declare,
    eventually,
    operator,
    post,
    post_policies,
    resource,
    stored,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
NAME = "kimi-k2"


def _status(kmock: Any, kind: str) -> tuple[str, str] | None:
    found = condition(stored(kmock, INFD, NAME), kind)
    return None if found is None else (found["status"], found["reason"])


async def test_a_resource_applied_before_its_policy_starts_once_the_policy_exists(kmock: Any) -> None:
    declare(kmock)
    async with operator(kmock):
        await post(kmock, resource(), INFD)  # `kubectl apply -f examples/ -f policies/`: the resource first
        await eventually(lambda: _status(kmock, "Ready") == ("False", "PolicyNotFound"), timeout=20)
        assert stored(kmock, DEPLOY, NAME) is None
        assert _status(kmock, "InvalidSpec") == ("False", "SpecValid")
        await asyncio.sleep(1.0)
        await post_policies(kmock)
        await eventually(lambda: stored(kmock, DEPLOY, NAME), timeout=30)  # retried, not a PermanentError
        await eventually(lambda: _status(kmock, "PolicyResolved") == ("True", "PolicyFound"), timeout=20)


async def test_deleting_a_policy_in_use_keeps_the_last_known_one(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock):
        await post(kmock, resource(), INFD)
        await eventually(lambda: stored(kmock, DEPLOY, NAME), timeout=20)
        await eventually(lambda: (stored(kmock, INFD, NAME) or {}).get("status", {}).get("policy"), timeout=20)
        async with kmock.delete(f"/apis/{SVPOL.rsplit('/', 1)[0]}/servingpolicies/coding-agent") as response:
            assert response.status < 300, await response.text()
        await eventually(lambda: _status(kmock, "PolicyResolved") == ("False", "PolicyDeleted"), timeout=20)
        await asyncio.sleep(1.5)  # a few more cycles
        assert _status(kmock, "InvalidSpec") == ("False", "SpecValid")
        assert stored(kmock, DEPLOY, NAME) is not None


async def test_a_deployment_infertune_did_not_create_is_left_alone(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    foreign = {"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": NAME, "namespace": NS, "uid": "uid-theirs", "resourceVersion": "1",
                            "labels": {"team": "b"}},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"team": "b"}},
                        "template": {"metadata": {"labels": {"team": "b"}},
                                     "spec": {"containers": [{"name": "app", "image": "theirs:1"}]}}}}
    await post(kmock, foreign, DEPLOY)
    async with operator(kmock):
        await post(kmock, resource(), INFD)
        ready = await eventually(lambda: (c := condition(stored(kmock, INFD, NAME), "Ready"))
                                 and c["reason"] == "OwnershipConflict" and c, timeout=20)
        await asyncio.sleep(1.0)
        live = stored(kmock, DEPLOY, NAME)
    assert f"Deployment {NS}/{NAME}" in ready["message"] and ready["status"] == "False"
    assert live is not None and live["spec"] == foreign["spec"] and "ownerReferences" not in live["metadata"]
    assert stored(kmock, "v1/services", NAME) is None
