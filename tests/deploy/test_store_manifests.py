"""The call store's deploy files checked statically (no cluster here): deploy/redis.yaml runs one
Redis with the persistence docs/guarantees.md asks for, and a Service for it; deploy/sidecar.yaml
runs `relay sidecar` replicas whose arguments the relay's own command line accepts, whose `--store`
names that Service and password, and whose grace period covers the drain; the image has the
store extra; docs/deploy.md explains both files."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from relay.cli import build_parser
from relay.store import open_store
from relay.store.redis import RedisStore
from relay.tools.sources import tool_registry
from tests.support.paths import REPO

DEPLOY = REPO / "deploy"


def documents(name: str) -> dict[str, dict[str, Any]]:
    found = [document for document in yaml.safe_load_all((DEPLOY / name).read_text()) if document]
    by_kind = {document["kind"]: document for document in found}
    assert len(by_kind) == len(found), name
    return by_kind


@pytest.fixture(scope="module")
def redis() -> dict[str, dict[str, Any]]:
    found = documents("redis.yaml")
    assert set(found) == {"ConfigMap", "StatefulSet", "Service"}
    return found


@pytest.fixture(scope="module")
def sidecar() -> dict[str, dict[str, Any]]:
    found = documents("sidecar.yaml")
    assert set(found) == {"Deployment", "Service", "PodDisruptionBudget"}
    return found


def only_container(workload: dict[str, Any]) -> dict[str, Any]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return container


def test_redis_keeps_what_it_acknowledged_and_never_evicts_a_lease(redis: dict[str, dict[str, Any]]) -> None:
    conf = dict(line.split(None, 1) for line in redis["ConfigMap"]["data"]["redis.conf"].splitlines()
                if line.strip() and not line.lstrip().startswith("#"))
    assert conf["appendonly"] == "yes" and conf["appendfsync"] in ("everysec", "always")
    assert conf["maxmemory-policy"] == "noeviction"
    statefulset = redis["StatefulSet"]
    assert statefulset["spec"]["replicas"] == 1   # one instance, not a cluster
    server = only_container(statefulset)
    assert server["args"][0] == "/etc/redis/redis.conf" and "--requirepass" in server["args"]
    mounts = {mount["name"]: mount["mountPath"] for mount in server["volumeMounts"]}
    assert mounts["data"] == conf["dir"]
    assert [claim["metadata"]["name"] for claim in statefulset["spec"]["volumeClaimTemplates"]] == ["data"]
    service = redis["Service"]
    assert service["spec"]["selector"] == statefulset["spec"]["template"]["metadata"]["labels"]
    [port] = service["spec"]["ports"]
    assert {"name": port["targetPort"], "containerPort": 6379} in server["ports"]


def test_the_sidecar_fleet_stores_its_calls_in_that_redis(redis: dict[str, dict[str, Any]],
                                                          sidecar: dict[str, dict[str, Any]]) -> None:
    relay = only_container(sidecar["Deployment"])
    assert relay["args"][0] == "sidecar"
    options = build_parser().parse_args(relay["args"])   # exits on an option `relay sidecar` lacks
    tool_registry(options.tools)
    url = urlsplit(options.store)
    service = redis["Service"]
    assert url.scheme == "redis" and url.hostname == service["metadata"]["name"]
    assert url.port == service["spec"]["ports"][0]["port"]
    # the password is the Redis's own secret, expanded by Kubernetes from the container's env
    assert url.password == "$(REDIS_PASSWORD)"
    redis_secret = only_container(redis["StatefulSet"])["envFrom"][0]["secretRef"]["name"]
    assert {"secretRef": {"name": redis_secret}} in relay["envFrom"]
    assert isinstance(open_store(options.store), RedisStore)   # a URL the store takes (nothing connects)
    assert relay["ports"] == [{"name": "http", "containerPort": options.port}]
    assert relay["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert "httpGet" not in relay["livenessProbe"]
    pod = sidecar["Deployment"]["spec"]["template"]["spec"]
    pre_stop = relay["lifecycle"]["preStop"]["exec"]["command"]
    assert pod["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + options.drain_seconds + 5
    assert sidecar["Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0   # a peer takes over
    labels = sidecar["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert sidecar["Service"]["spec"]["selector"] == labels
    assert sidecar["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels


def test_the_image_has_the_store_extra() -> None:
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    installs = [line for line in text.splitlines() if line.startswith("RUN pip install")]
    assert any("[store]" in line for line in installs), installs


def test_docs_deploy_explains_the_store_files() -> None:
    guide = (REPO / "docs" / "deploy.md").read_text()
    for name in ("deploy/redis.yaml", "deploy/sidecar.yaml", "--store", "--lease-seconds", "appendfsync"):
        assert name in guide, name
