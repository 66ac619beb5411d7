"""deploy/k8s/ cannot be applied here (no cluster): each manifest is validated against the
Kubernetes API schemas that kubernetes-validate ships (offline; strict: an unknown or misspelt
field is an error), and what a user would notice is checked
against the code that runs in the pods:
- the orchestrator's command line, run through a real shell and `turntaker serve`'s own parser
  and settings: it listens on all interfaces on its container port, with its route id;
- its probes (/readyz, /healthz on that port) and a grace period that leaves room for the
  preStop sleep and the drain;
- a resume's session id leads through nginx's map to the pod that made the session, and nginx
  itself accepts the configuration;
- Triton asks for a GPU, is probed on /v2/health/ready, and loads what the pipeline needs;
- the session store the orchestrators are given is the Redis Service, which admits them;
- every Service selects pods of these manifests that have the ports it targets;
- every container is bounded and unprivileged.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from orchestrator.cli import build_parser
from orchestrator.service.app import new_session_id
from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import config_from_args, needed_models
from orchestrator.supervisor.nginx_conf import find_nginx
from orchestrator.supervisor.workers import STOP_MARGIN_S
from orchestrator.triton.launcher import with_ensemble_steps

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# kubernetes-validate 1.37 bundles the schemas of Kubernetes 1.25 to 1.37. 1.33, older than
# the releases that clusters run now, keeps the manifests off fields newer than that (they pass
# 1.29 and 1.37 too: `kubernetes-validate -k 1.29 --strict deploy/k8s/*.yaml`).
KUBERNETES = "1.33"
NAMESPACE = "turntaker"
FILES = sorted(K8S.glob("*.yaml"))

Doc = dict[str, Any]


def _load(text: str) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


DOCS = [doc for path in FILES for doc in _load(path.read_text())]


def _one(kind: str, name: str) -> Doc:
    found = [d for d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name} in deploy/k8s/, found {len(found)}"
    return found[0]


def _workloads() -> list[Doc]:
    return [d for d in DOCS if d["kind"] in ("Deployment", "StatefulSet")]


def _containers(workload: Doc) -> list[Doc]:
    containers: list[Doc] = workload["spec"]["template"]["spec"]["containers"]
    return containers


def _container_port(container: Doc, port: int | str) -> int:
    """A probe's or a Service's target port (a name or a number) as the container's port."""
    by_name = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    numbers = {p["containerPort"] for p in container.get("ports", [])}
    if isinstance(port, str):
        assert port in by_name, f"{container['name']} has no port named {port}"
        return by_name[port]
    assert port in numbers, f"{container['name']} does not declare port {port}"
    return port


ORCHESTRATOR = _one("StatefulSet", "turntaker")
TRITON = _one("Deployment", "turntaker-triton")
NGINX = _one("Deployment", "turntaker-nginx")


def _validate(doc: Doc) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_manifest_validates_against_the_kubernetes_schema(path: Path) -> None:
    docs = _load(path.read_text())
    assert docs, f"{path.name} holds no manifest"
    for doc in docs:
        # A kind or apiVersion the release does not know raises SchemaNotFoundError: a failure.
        _validate(doc)
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, doc["metadata"]["name"]


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        # A misspelt field: Kubernetes would refuse it, or drop it silently (no probe).
        ("readinessProbe:", "readinesProbe:", "'readinesProbe' was unexpected"),
        ("containerPort: 8000", 'containerPort: "8000"', "'8000' is not of type 'integer'"),
        # An API removed long ago (1.16).
        (
            "apiVersion: apps/v1\nkind: StatefulSet",
            "apiVersion: apps/v1beta2\nkind: StatefulSet",
            "Couldn't find schema for kind StatefulSet with api version apps/v1beta2",
        ),
    ],
    ids=["misspelt-field", "wrong-type", "removed-api"],
)
def test_a_broken_copy_of_a_manifest_is_refused(
    tmp_path: Path, old: str, new: str, error: str
) -> None:
    text = (K8S / "orchestrator.yaml").read_text()
    assert old in text
    broken = tmp_path / "orchestrator.yaml"
    broken.write_text(text.replace(old, new, 1))
    with pytest.raises(
        (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError)
    ) as caught:
        for doc in _load(broken.read_text()):
            _validate(doc)
    assert error in caught.value.message


def _serve_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ordinal: int) -> ServiceConfig:
    """What `turntaker serve` in pod turntaker-<ordinal> is configured with: its command run by
    a real shell (a stand-in `turntaker` prints its arguments), parsed by the real parser, with
    the container's environment."""
    (container,) = _containers(ORCHESTRATOR)
    pod = f"{ORCHESTRATOR['metadata']['name']}-{ordinal}"
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = pod
        else:
            env[var["name"]] = "tester:sk-test"  # the Secret's `name:key,...`
    settings = {f"TURNTAKER_{name.upper()}" for name in ServiceConfig.__dataclass_fields__}
    unknown = {name for name in env if name.startswith("TURNTAKER_")} - settings
    assert not unknown, f"not settings of ServiceConfig (ignored): {sorted(unknown)}"

    stand_in = tmp_path / "bin" / "turntaker"
    stand_in.parent.mkdir()
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stand_in.chmod(0o755)
    shell = subprocess.run(
        [*container["command"], *container["args"]],
        env={**env, "PATH": f"{stand_in.parent}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    argv = shell.stdout.splitlines()
    assert argv[0] == "serve", argv
    args = build_parser().parse_args(argv)
    assert args.workers == 1, "one server per pod: the pods are the workers"
    for name in [n for n in os.environ if n.startswith("TURNTAKER_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return config_from_args(args)


def test_the_orchestrator_listens_on_all_interfaces_of_its_port_with_its_route_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _serve_config(monkeypatch, tmp_path, ordinal=2)
    (container,) = _containers(ORCHESTRATOR)
    # 127.0.0.1 (the default) would refuse the kubelet's probes and nginx.
    assert config.host == "0.0.0.0"
    assert config.port == _container_port(container, "http")
    assert config.route_id == "w2"
    assert not config.local_triton, "a pod must not start a Triton of its own"
    assert ORCHESTRATOR["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_the_orchestrator_is_probed_on_readyz_and_healthz_of_its_port() -> None:
    (container,) = _containers(ORCHESTRATOR)
    port = _container_port(container, "http")
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("readinessProbe", "livenessProbe", "startupProbe")
    }
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert _container_port(container, probe["port"]) == port


def test_the_grace_period_leaves_room_for_the_prestop_sleep_and_the_drain(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _serve_config(monkeypatch, tmp_path, ordinal=0)
    (container,) = _containers(ORCHESTRATOR)
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop_s = float(command[1])
    grace_s = ORCHESTRATOR["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # SIGTERM comes after the preStop hook, inside the same grace period; the server then
    # drains for up to drain_timeout_s and exits (the supervisor allows STOP_MARGIN_S for it).
    assert grace_s >= pre_stop_s + config.drain_timeout_s + STOP_MARGIN_S
    assert pre_stop_s > 0


def _nginx_conf() -> str:
    text: str = _one("ConfigMap", "turntaker-nginx")["data"]["nginx.conf"]
    return text


def _route_map(conf: str) -> tuple[str, list[tuple[str, str]]]:
    """nginx's map of `?session_id=` to an upstream: its default and its (regex, target)s."""
    block = re.search(r"map \$arg_session_id \$(\w+) \{\n(.*?)\n\s*\}", conf, re.DOTALL)
    assert block, "no map of $arg_session_id in the nginx config"
    default, rules = "", []
    for line in block.group(2).splitlines():
        key, value = line.strip().rstrip(";").split()
        if key == "default":
            default = value
        else:
            rules.append((key.strip('"').removeprefix("~"), value))
    assert f"proxy_pass http://${block.group(1)};" in conf
    return default, rules


def _route(session_id: str) -> str:
    default, rules = _route_map(_nginx_conf())
    for pattern, target in rules:
        found = re.search(pattern, session_id)
        if found:
            return found.expand(re.sub(r"\$(\d)", r"\\\1", target))
    return default


def _fqdn(service: str) -> str:
    return f"{service}.{NAMESPACE}.svc.cluster.local"


def test_a_resume_reaches_the_pod_that_made_the_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _serve_config(monkeypatch, tmp_path, ordinal=7)
    (container,) = _containers(ORCHESTRATOR)
    port = _container_port(container, "http")
    headless = ORCHESTRATOR["spec"]["serviceName"]
    pod = f"{ORCHESTRATOR['metadata']['name']}-7"
    assert _route(new_session_id(config)) == f"{pod}.{_fqdn(headless)}:{port}"
    # The pods' names: a headless Service that publishes pods whose /readyz says 503 too
    # (they still hold sessions).
    service = _one("Service", headless)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    # Anything else: the pool, the Service of the ready pods.
    for other in ("", "sess_0123456789abcdef", "sess_eu1_0123", "sess_w1", "w1_sess_w1_x"):
        assert _route(other) == "turntaker_pool", other
    pool = re.search(r"upstream turntaker_pool \{\n\s*(?:#.*\n\s*)*server (\S+);", _nginx_conf())
    assert pool, "no upstream turntaker_pool"
    service_name = pool.group(1).split(".")[0]
    assert pool.group(1) == f"{_fqdn(service_name)}:{port}"
    assert _selected(_one("Service", service_name)) == [ORCHESTRATOR]
    # A named pod that is gone, or answers 503 (it drains), falls over to the pool.
    assert re.search(r"error_page 502 503 504 = @(\w+);", _nginx_conf())
    assert "proxy_pass http://turntaker_pool;" in _nginx_conf()


def test_nginx_accepts_its_configuration_and_runs_it_from_the_configmap(tmp_path: Path) -> None:
    nginx = find_nginx()
    assert nginx is not None, "nginx is not installed (the Makefile's APT_PACKAGES has it)"
    (container,) = _containers(NGINX)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert container["command"][container["command"].index("-c") + 1] == (
        f"{mount['mountPath']}/nginx.conf"
    )
    conf = _nginx_conf()
    listen = re.search(r"listen (\d+);", conf)
    assert listen and int(listen.group(1)) == _container_port(container, "http")
    # Cluster names cannot be resolved here: nginx looks the resolver and the upstream up at
    # load; a pod's name only at request time.
    local = (
        conf.replace("kube-dns.kube-system.svc.cluster.local", "127.0.0.1")
        .replace(_fqdn("turntaker-realtime"), "127.0.0.1")
        .replace("/tmp/", f"{tmp_path}/")
    )
    assert local.count("svc.cluster.local") == 1, "only the map's pod names are left"
    (tmp_path / "nginx.conf").write_text(local)
    check = subprocess.run(
        [
            str(nginx),
            "-t",
            "-p",
            f"{tmp_path}/",
            "-c",
            str(tmp_path / "nginx.conf"),
            "-e",
            str(tmp_path / "error.log"),
        ],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_triton_asks_for_a_gpu_and_loads_what_the_pipeline_needs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (container,) = _containers(TRITON)
    resources = container["resources"]
    assert int(resources["limits"]["nvidia.com/gpu"]) == 1
    assert int(resources["requests"]["nvidia.com/gpu"]) == 1
    ready = container["readinessProbe"]["httpGet"]
    assert ready["path"] == "/v2/health/ready"
    assert _container_port(container, ready["port"]) == 8000
    assert {p["containerPort"] for p in container["ports"]} == {8000, 8001, 8002}
    # The models: those the orchestrators' pipeline needs, ensembles with their steps (explicit
    # model control, as orchestrator/triton/launcher.py starts a local Triton).
    config = _serve_config(monkeypatch, tmp_path, ordinal=0)
    args = container["args"]
    loaded = [a.removeprefix("--load-model=") for a in args if a.startswith("--load-model=")]
    assert "--model-control-mode=explicit" in args
    assert sorted(loaded) == sorted(
        with_ensemble_steps(ROOT / "model_repository", needed_models(config))
    )
    # Where Dockerfile.triton copies the repository; shared memory for the Python backend.
    assert "COPY model_repository /models" in (ROOT / "Dockerfile.triton").read_text()
    assert "--model-repository=/models" in args
    assert "/dev/shm" in {m["mountPath"] for m in container["volumeMounts"]}
    # The orchestrators dial the Triton Service's gRPC port.
    (url,) = config.triton_urls
    host, port = url.rsplit(":", 1)
    (service,) = [d for d in DOCS if d["kind"] == "Service" and d["metadata"]["name"] == host]
    assert _selected(service) == [TRITON]
    target = next(p for p in service["spec"]["ports"] if p["port"] == int(port))
    assert _container_port(container, target["targetPort"]) == 8001


def test_the_session_store_is_the_redis_service_the_orchestrators_may_reach(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _serve_config(monkeypatch, tmp_path, ordinal=0)
    store = urlsplit(config.session_store)
    assert store.scheme == "redis" and store.hostname and store.port
    (service,) = [
        d for d in DOCS if d["kind"] == "Service" and d["metadata"]["name"] == store.hostname
    ]
    (redis,) = _selected(service)
    target = next(p for p in service["spec"]["ports"] if p["port"] == store.port)
    (container,) = _containers(redis)
    assert _container_port(container, target["targetPort"]) == 6379
    # Its NetworkPolicy admits the orchestrator pods.
    (policy,) = [d for d in DOCS if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    peers = [peer["podSelector"]["matchLabels"] for peer in policy["spec"]["ingress"][0]["from"]]
    orchestrator_labels = ORCHESTRATOR["spec"]["template"]["metadata"]["labels"].items()
    assert any(peer.items() <= orchestrator_labels for peer in peers)


def _selected(service: Doc) -> list[Doc]:
    """The workloads whose pods a Service selects."""
    return _matching(service["metadata"]["namespace"], service["spec"]["selector"])


def _matching(namespace: str, labels: dict[str, str]) -> list[Doc]:
    """The workloads of `namespace` whose pods carry `labels`."""
    return [
        w
        for w in _workloads()
        if w["metadata"]["namespace"] == namespace
        and labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]


def test_every_service_selects_pods_here_that_have_its_ports() -> None:
    services = [d for d in DOCS if d["kind"] == "Service"]
    assert len(services) >= 5
    for service in services:
        name = service["metadata"]["name"]
        workloads = _selected(service)
        assert workloads, f"Service {name} selects no pods of deploy/k8s/"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for workload in workloads:
                declared = [c for c in _containers(workload) if _has_port(c, target)]
                assert declared, f"Service {name}: {workload['metadata']['name']} lacks {target}"
    for workload in _workloads():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for policy in [d for d in DOCS if d["kind"] == "NetworkPolicy"]:
        spec, namespace = policy["spec"], policy["metadata"]["namespace"]
        protected = _matching(namespace, spec["podSelector"]["matchLabels"])
        assert protected, f"NetworkPolicy {policy['metadata']['name']} protects no pods"
        for rule in spec["ingress"]:
            for peer in rule["from"]:
                allowed = _matching(namespace, peer["podSelector"]["matchLabels"])
                assert allowed, f"NetworkPolicy {policy['metadata']['name']} admits no pods"
            for port in rule["ports"]:
                assert all(
                    any(_has_port(c, port["port"]) for c in _containers(w)) for w in protected
                )


def _has_port(container: Doc, port: int | str) -> bool:
    return any(
        p.get("name") == port or p["containerPort"] == port for p in container.get("ports", [])
    )


@pytest.mark.parametrize(
    "workload", _workloads(), ids=[w["metadata"]["name"] for w in _workloads()]
)
def test_every_container_is_bounded_and_unprivileged(workload: Doc) -> None:
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    # TURNTAKER_* service variables would be read as settings; the others are noise.
    assert pod["enableServiceLinks"] is False
    for container in pod["containers"]:
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert {"cpu", "memory"} <= requests.keys(), container["name"]
        assert "memory" in limits, container["name"]
        security = container["securityContext"]
        assert security["privileged"] is False
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert ":" in container["image"], f"{container['name']}: pin the image's tag"
