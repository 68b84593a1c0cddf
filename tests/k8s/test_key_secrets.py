"""A key Secret that holds no usable key (edited by hand, or by a tool rotating keys) is a condition on its
TritonServer naming the Secret and the fix, and fails static: the pod template keeps the key the pods
run with (nothing rolls, least of all to an empty key, with which Triton would not start) and no model is
unloaded, by the operator that held the key and by one that starts without it. On the emulated API server;
with a real tritonserver where the pods' models must stay."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from tests.support.operator import Cluster, Pods, api_server, load_calls, running_operator
from tests.support.resources import SERVER
from tests.support.serving import answers_with, serve_add_model
from triton_operator.k8s.server.key_secrets import KEY_MADE_ANNOTATION, key_problem, made_at_problem
from triton_operator.render.deployment import TEMPLATE_HASH_ANNOTATION
from triton_operator.render.manifests import CONTROL_KEY

SECRET = "triton-control"
DATA_KEY = CONTROL_KEY.data_key
# The operator's settings: Secrets read again each second (they are not watched), keys replaced by age.
SETTINGS = {"resync_seconds": 1, "control_key_max_age_seconds": 30 * 86400}


def encoded(key: bytes) -> str:
    return base64.b64encode(key).decode()


# Each way to break the Secret (a merge patch of it), and what the condition says of it.
BROKEN = {
    "no data": ({"data": None}, "has no data"),
    "no key": ({"data": {DATA_KEY: None, "other": encoded(b"x")}}, f"has no {DATA_KEY}"),
    "not UTF-8": ({"data": {DATA_KEY: encoded(b"\xff\xfe\xfd")}}, "is not UTF-8"),
    "empty": ({"data": {DATA_KEY: ""}}, "is empty"),
    "a space in it": ({"data": {DATA_KEY: encoded(b"two words\n")}}, "visible ASCII"),
    "made-at not a time": ({"metadata": {"annotations": {KEY_MADE_ANNOTATION: "yesterday"}}}, "is not a time"),
}


def keys_condition(cluster: Cluster) -> dict[str, Any]:
    return cluster.condition("TritonServer", "triton", "KeySecretsValid") or {}


def pod_template(cluster: Cluster) -> dict[str, Any]:
    """What rolls the pods when it changes: the template's hash and its key digests."""
    deployment = cluster.get("Deployment", "triton") or {}
    return {
        "hash": (deployment.get("metadata") or {}).get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION),
        "keys": deployment.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations"),
    }


@pytest.mark.parametrize("case", BROKEN)
async def test_a_broken_key_secret_is_a_condition_naming_it_and_the_fix_and_rolls_nothing(case: str) -> None:
    patch, what = BROKEN[case]
    async with api_server() as cluster, running_operator(cluster, **SETTINGS):
        await cluster.create(copy.deepcopy(SERVER))
        await cluster.wait("the keys usable", lambda: keys_condition(cluster).get("status") == "True")
        template = await cluster.wait("the Deployment", lambda: pod_template(cluster)["keys"] and pod_template(cluster))
        key = cluster.control_key("triton")

        await cluster.patch("Secret", SECRET, patch)
        condition = await cluster.wait("the condition", lambda: keys_condition(cluster).get("status") == "False")
        condition = keys_condition(cluster)
        assert condition["reason"] == "KeySecretInvalid"
        assert f"Secret {SECRET}" in condition["message"] and what in condition["message"]
        ready = cluster.condition("TritonServer", "triton", "Ready") or {}
        assert ready.get("status") == "False" and ready.get("reason") == "KeySecretInvalid"
        assert any(e["reason"] == "KeySecretInvalid" for e in cluster.all("Event"))
        assert pod_template(cluster) == template

        await cluster.delete("Secret", SECRET)  # one way out the condition names: made again with the key held
        await cluster.wait("the keys usable again", lambda: keys_condition(cluster).get("status") == "True")
        assert cluster.control_key("triton") == key and pod_template(cluster) == template


@pytest.mark.triton
async def test_serving_pods_keep_their_models_through_a_broken_key_and_an_operator_restart(pods: Pods) -> None:
    """The operator syncs the pods with the key it holds; one that starts holding none syncs none: no model is
    unloaded, no readiness turned False, no call made with a key the pods were not started with."""
    async with api_server() as cluster:
        async with running_operator(cluster, **SETTINGS):
            await serve_add_model(cluster, pods, ("triton-a",))
            await cluster.wait("in service", lambda: (cluster.pod_condition("triton-a") or {}).get("status") == "True")
            template = pod_template(cluster)
            await cluster.patch("Secret", SECRET, BROKEN["empty"][0])
            await cluster.wait("the condition", lambda: keys_condition(cluster).get("status") == "False")
            loads = load_calls("triton-a")
        async with running_operator(cluster, **SETTINGS) as operator:
            await cluster.wait("its worker", lambda: ("default", "triton") in operator.workers.running)
            worker = operator.workers.get(("default", "triton"))
            for _ in range(2):
                await worker.next_pass()
            assert CONTROL_KEY not in worker.children.secrets.known_keys  # it holds no key: no pod is synced
            assert keys_condition(cluster)["reason"] == "KeySecretInvalid"
            assert (cluster.pod_condition("triton-a") or {}).get("status") == "True"
            assert pod_template(cluster) == template and load_calls("triton-a") == loads
            assert answers_with(pods.tritons["triton-a"].grpc_url, [2.0] * 4)


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        pytest.param({"data": {DATA_KEY: encoded(b"Ab0-_~!")}}, None, id="visible ASCII"),
        pytest.param({"data": []}, "has no data", id="data a list"),
        pytest.param({"data": {DATA_KEY: 5}}, f"has no {DATA_KEY}", id="not a string"),
        pytest.param({"data": {DATA_KEY: "not base64!"}}, "is not UTF-8", id="not base64"),
        pytest.param({"data": {DATA_KEY: encoded("clé".encode())}}, "visible ASCII", id="not ASCII"),
    ],
)
def test_what_makes_a_key_usable(secret: dict[str, Any], problem: str | None) -> None:
    found = key_problem({"metadata": {"name": SECRET}, **secret}, CONTROL_KEY)
    assert found is None if problem is None else problem in (found or "")


def test_a_made_at_annotation_is_a_time_or_absent() -> None:
    made = {"metadata": {"name": SECRET, "annotations": {KEY_MADE_ANNOTATION: "2025-06-01T00:00:00Z"}}}
    assert made_at_problem(made) is None and made_at_problem({"metadata": {"name": SECRET}}) is None
    not_a_time = {"metadata": {"annotations": {KEY_MADE_ANNOTATION: "1 May"}}}
    assert "2025-06-01T00:00:00Z" in (made_at_problem(not_a_time) or "")
