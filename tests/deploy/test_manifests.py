"""What cannot run here (a Docker build, a Kubernetes cluster) checked statically: the manifest
parses and its pieces point at each other; the relay's arguments in the image and in the
Deployment are ones `relay serve` accepts; the probes ask the port the relay listens on for
/healthz; the grace period covers preStop and the drain; the image runs as the same unprivileged
user the pod asks for; the image's health check command really tells a serving relay (0) from a
draining one (1); HAProxy's config keeps the choices docs/deploy.md explains."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from typing import Any

import pytest
import yaml

from relay.cli import build_parser
from relay.edges.config import DEFAULT_PORT
from relay.tools.sources import tool_registry
from relay.mock import MockUpstream
from tests.support.clients import TIMEOUT
from tests.support.paths import REPO
from tests.support.relays import relay_for

DEPLOY = REPO / "deploy"
REALTIME_SESSION_SECONDS = 3600   # the longest a provider keeps a realtime session (OpenAI: 60 min)


def serve_options(args: list[str]) -> Any:
    """`relay serve ARGS` parsed by the relay's own command line (exits on an unknown option)."""
    assert args[0] == "serve", args
    return build_parser().parse_args(args)


# ---- the Dockerfile ------------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """The final stage's instructions, continuation lines joined: (INSTRUCTION, rest)."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    instructions = [tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    last_stage = max(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    return [(name.upper(), rest) for name, rest in instructions[last_stage:]]  # type: ignore[misc]


def instruction(name: str) -> str:
    [value] = [rest for found, rest in dockerfile() if found == name]
    return value


def test_the_image_runs_relay_serve_as_an_unprivileged_user_on_the_port_it_exposes() -> None:
    assert json.loads(instruction("ENTRYPOINT")) == ["relay"]
    options = serve_options(json.loads(instruction("CMD")))
    assert (options.host, options.port) == ("0.0.0.0", DEFAULT_PORT)
    assert instruction("EXPOSE") == str(options.port)
    assert instruction("USER") not in ("root", "0")
    useradd = next(rest for name, rest in dockerfile() if name == "RUN" and "useradd" in rest)
    assert re.search(rf"--uid (\d+) .*\b{instruction('USER')}\b", useradd)
    assert instruction("STOPSIGNAL") == "SIGTERM"
    tool_registry(options.tools)   # the tools it names load
    for first_stage_copy in re.findall(r"^COPY (?!--from)(.+) \S+$", (DEPLOY / "Dockerfile").read_text(), re.M):
        for source in first_stage_copy.split():
            assert (REPO / source).exists(), source


def healthcheck_command() -> list[str]:
    healthcheck = instruction("HEALTHCHECK")
    return json.loads(healthcheck[healthcheck.index("CMD") + 3:])


async def test_the_image_health_check_passes_on_a_serving_relay_and_fails_on_a_draining_one(
        weather_mock: MockUpstream) -> None:
    command = healthcheck_command()
    assert command[:2] == ["python", "-c"] and f"http://127.0.0.1:{DEFAULT_PORT}/healthz" in command[2]

    async def check(port: int) -> int:
        probe = await asyncio.create_subprocess_exec(
            sys.executable, "-c", command[2].replace(f":{DEFAULT_PORT}/", f":{port}/"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        return await asyncio.wait_for(probe.wait(), TIMEOUT)

    async with relay_for(weather_mock, drain_seconds=30) as server:
        assert await check(server.port) == 0
        server.request_stop()
        assert await check(server.port) == 1


# ---- the Kubernetes manifest ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def manifest() -> dict[str, dict[str, Any]]:
    documents = [document for document in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()) if document]
    by_kind = {document["kind"]: document for document in documents}
    assert len(by_kind) == len(documents)
    assert set(by_kind) == {"Deployment", "Service", "Ingress", "PodMonitor", "PersistentVolumeClaim",
                            "PodDisruptionBudget"}
    return by_kind


def container(manifest: dict[str, dict[str, Any]]) -> dict[str, Any]:
    [relay] = manifest["Deployment"]["spec"]["template"]["spec"]["containers"]
    return relay


def test_the_deployment_runs_relay_serve_with_the_images_settings(manifest: dict[str, dict[str, Any]]) -> None:
    relay = container(manifest)
    options = serve_options(relay["args"])
    image = serve_options(json.loads(instruction("CMD")))
    assert (options.host, options.port, options.drain_seconds) == (image.host, image.port, image.drain_seconds)
    assert relay["ports"] == [{"name": "http", "containerPort": options.port}]
    tool_registry(options.tools)
    pod = manifest["Deployment"]["spec"]["template"]["spec"]
    useradd = next(rest for name, rest in dockerfile() if name == "RUN" and "useradd" in rest)
    uid = int(re.search(r"--uid (\d+)", useradd)[1])   # type: ignore[index]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == uid
    mounts = {mount["name"]: mount["mountPath"] for mount in relay["volumeMounts"]}
    assert mounts["recordings"] == options.record
    [claim] = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if v["name"] == "recordings"]
    assert claim == manifest["PersistentVolumeClaim"]["metadata"]["name"]
    assert manifest["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]   # every pod writes


def test_readiness_asks_healthz_on_the_relays_port_and_liveness_does_not(manifest: dict[str, dict[str, Any]]) -> None:
    relay = container(manifest)
    readiness, liveness = relay["readinessProbe"], relay["livenessProbe"]
    assert readiness["httpGet"] == {"path": "/healthz", "port": "http"}
    assert readiness["failureThreshold"] == 1   # out at the first 503
    # /healthz is 503 while the relay drains: a liveness probe on it would restart a draining pod
    assert "httpGet" not in liveness and liveness["tcpSocket"] == {"port": "http"}


def test_the_grace_period_covers_prestop_and_the_drain(manifest: dict[str, dict[str, Any]]) -> None:
    relay = container(manifest)
    pod = manifest["Deployment"]["spec"]["template"]["spec"]
    pre_stop = relay["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    drain = serve_options(relay["args"]).drain_seconds
    assert pod["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + drain + 5
    strategy = manifest["Deployment"]["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0   # a rolling update adds before it drains


def test_service_ingress_and_podmonitor_point_at_the_pods(manifest: dict[str, dict[str, Any]]) -> None:
    labels = manifest["Deployment"]["spec"]["template"]["metadata"]["labels"]
    service = manifest["Service"]
    assert service["spec"]["selector"] == labels
    assert [port["targetPort"] for port in service["spec"]["ports"]] == ["http"]
    [rule] = manifest["Ingress"]["spec"]["rules"]
    [path] = rule["http"]["paths"]
    assert path["backend"]["service"] == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    annotations = manifest["Ingress"]["metadata"]["annotations"]
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(annotations[f"nginx.ingress.kubernetes.io/{timeout}"]) >= REALTIME_SESSION_SECONDS
    assert "http_503" in annotations["nginx.ingress.kubernetes.io/proxy-next-upstream"]
    monitor = manifest["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"] == labels
    assert monitor["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert manifest["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels


# ---- the HAProxy config --------------------------------------------------------------------------

def haproxy_sections() -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = []
    for line in (DEPLOY / "haproxy.cfg").read_text().splitlines():
        code = line.split("#", 1)[0].rstrip()
        if not code:
            continue
        if not code[0].isspace():
            sections.append((code, []))
        else:
            sections[-1][1].append(" ".join(code.split()))
    return sections


def test_the_haproxy_config_keeps_its_choices() -> None:
    sections = dict(haproxy_sections())
    defaults, backend = sections["defaults"], sections["backend relays"]
    assert haproxy_sections()[-1][0] == "backend relays"   # scripts/cluster appends the servers to it
    timeouts = {line.split()[1]: line.split()[2] for line in defaults if line.startswith("timeout ")}
    assert timeouts["tunnel"] == "1h"   # = REALTIME_SESSION_SECONDS
    assert "mode http" in defaults and "option redispatch 1" in defaults
    retry_on = next(line for line in defaults if line.startswith("retry-on ")).split()[1:]
    assert {"conn-failure", "503"} <= set(retry_on)
    assert "balance leastconn" in backend
    assert "http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host relay" in backend
    assert "http-check expect status 200" in backend
    assert not any(line.startswith("server ") for line in backend)   # the servers are the operator's
    frontend = sections["frontend realtime"]
    assert shlex.split(next(line for line in frontend if line.startswith("bind ")))[1] == "${RELAY_LB_BIND-:8080}"


def test_docs_deploy_names_the_files_it_explains() -> None:
    guide = (REPO / "docs" / "deploy.md").read_text()
    for name in ("deploy/haproxy.cfg", "deploy/Dockerfile", "deploy/kubernetes.yaml", "scripts/cluster",
                 "scripts/cluster-soak", "--drain-seconds", "/healthz"):
        assert name in guide, name
