"""deploy/k8s/*.yaml, the manifests docs/deploy.md's Kubernetes section applies, checked by construction (no cluster
runs here): kinds and names, selectors that match their pods' labels, Services whose ports reach a container port,
every command line parsed by its program's own parser, URLs that name the Service and port they must reach, probes
on routes the apps serve, the pool key mounted from a Secret exactly where --pool-key-file points, and no secret
value in any file."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from starlette.routing import Match

from tests.deploy.deploy_support import REPO, ParsedCommand, parse_command

K8S = REPO / "deploy" / "k8s"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
WORKLOADS = ("Deployment", "StatefulSet")
IMAGE_USER = 10001
"""The image's numeric user (Dockerfile ``USER 10001:10001``)."""
SECRET_VALUE = re.compile(r"(sk-[A-Za-z0-9_-]{12,}|-----BEGIN [A-Z ]*PRIVATE KEY-----|password:\s*\S)", re.IGNORECASE)
NAMED_OPTIONS = ("--pool", "--pool-backend", "--pool-key-file", "--pool-capacity")


def manifests() -> list[dict[str, Any]]:
    documents = []
    for path in sorted(K8S.glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    return documents


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in manifests():
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in found, f"{key} defined twice"
        found[key] = doc
    return found


def of_kind(objects: dict[tuple[str, str], dict[str, Any]], *kinds: str) -> dict[str, dict[str, Any]]:
    return {name: doc for (kind, name), doc in objects.items() if kind in kinds}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return result


def argv(container: dict[str, Any]) -> list[str]:
    return [str(item) for item in [*container.get("command", []), *container.get("args", [])]]


def agent_argv(container: dict[str, Any]) -> list[str]:
    """The program a launcher wraps (after ``--``), else the container's own command line."""
    line = argv(container)
    return line[line.index("--") + 1 :] if "--" in line else line


def flag(line: list[str], name: str) -> str:
    assert line.count(name) == 1, f"{name} given {line.count(name)} times in {line}"
    return line[line.index(name) + 1]


def service_url(objects: dict[tuple[str, str], dict[str, Any]], url: str) -> tuple[dict[str, Any], int]:
    """The Service a URL names by host, and the port it names (which that Service must have)."""
    parts = urlsplit(url)
    services = of_kind(objects, "Service")
    assert parts.hostname in services, f"{url}: no Service {parts.hostname}"
    service = services[parts.hostname]
    port = parts.port
    assert port is not None and port in [item["port"] for item in service["spec"]["ports"]], f"{url}: not its port"
    return service, port


def test_the_manifests_hold_the_documented_objects(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert set(objects) == {
        ("Service", "arena-postgres"),
        ("StatefulSet", "arena-postgres"),
        ("Service", "arena-backend"),
        ("Deployment", "arena-backend"),
        ("Service", "arena-green"),
        ("PersistentVolumeClaim", "arena-green-runs"),
        ("Deployment", "arena-green"),
        ("Deployment", "arena-green-worker"),
    }
    versions = {"Service": "v1", "PersistentVolumeClaim": "v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1"}
    for (kind, name), doc in objects.items():
        assert doc["apiVersion"] == versions[kind], name
    assert not of_kind(objects, "Secret"), "Secrets are created with kubectl (docs/deploy.md), never committed"


def test_selectors_match_their_pods_labels_and_services_reach_a_container_port(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    workloads = of_kind(objects, *WORKLOADS)
    for name, workload in workloads.items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector and selector.items() <= labels.items(), name
    for name, service in of_kind(objects, "Service").items():
        selector = service["spec"]["selector"]
        targets = [
            w for w in workloads.values() if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(targets) == 1, f"Service {name} selects {len(targets)} workloads"
        ports = {
            key: port["containerPort"]
            for container in containers(targets[0])
            for port in container.get("ports", [])
            for key in (port["name"], port["containerPort"])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"Service {name}: targetPort {port['targetPort']} is no container port"
            assert ports[port["targetPort"]] == port["port"], f"Service {name}: the same port number inside and out"
    statefulset = of_kind(objects, "StatefulSet")["arena-postgres"]
    headless = of_kind(objects, "Service")[statefulset["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"


def test_every_command_is_accepted_by_its_program(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    parsed = 0
    for name, workload in of_kind(objects, *WORKLOADS).items():
        for container in containers(workload):
            line = argv(container)
            if container["image"].startswith("postgres:"):
                continue
            command = parse_command(line)
            assert command.extra == [] or command.wrapped is not None, f"{name}: stray arguments {command.extra}"
            parsed += 1
    assert parsed == 3


def _parsed(objects: dict[tuple[str, str], dict[str, Any]], name: str) -> ParsedCommand:
    return parse_command(argv(containers(of_kind(objects, *WORKLOADS)[name])[0]))


def test_urls_name_the_services_they_must_reach(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    backend = _parsed(objects, "arena-backend").wrapped
    assert backend is not None
    service, port = service_url(objects, backend.url_option("public_url"))
    assert service["metadata"]["name"] == "arena-backend" and port == backend.options["port"]
    db = urlsplit(backend.settings.db_url)
    assert db.scheme == "postgresql" and db.password is None, "the password travels as PGPASSWORD"
    service, _ = service_url(objects, f"http://{db.hostname}:{db.port}")
    assert service["metadata"]["name"] == "arena-postgres"
    postgres = containers(of_kind(objects, "StatefulSet")["arena-postgres"])[0]
    env = {item["name"]: item for item in postgres["env"]}
    assert (db.username, db.path) == (env["POSTGRES_USER"]["value"], "/" + env["POSTGRES_DB"]["value"])
    green = _parsed(objects, "arena-green")
    assert green.wrapped is not None
    service, port = service_url(objects, green.wrapped.url_option("card_url"))
    assert service["metadata"]["name"] == "arena-green" and port == green.wrapped.options["port"]
    assert urlsplit(green.url_option("agent_url")).port == green.wrapped.options["port"]


def test_every_green_agent_is_in_one_pool_on_the_backend_service(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    pools, scenarios = set(), {}
    for name in ("arena-green", "arena-green-worker"):
        line = agent_argv(containers(of_kind(objects, *WORKLOADS)[name])[0])
        options = parse_command(line).options
        pools.add(options["pool"])
        scenarios[name] = flag(line, "--scenario")
        service, _ = service_url(objects, options["pool_backend"])
        assert service["metadata"]["name"] == "arena-backend", name
        assert 1 <= int(options["pool_capacity"]) <= 4096
        assert [flag(line, option) for option in NAMED_OPTIONS]  # each given exactly once
    assert len(pools) == 1
    assert len(set(scenarios.values())) == 1, f"members run only their operator's LLM user settings: {scenarios}"


def test_the_pool_key_is_a_secret_file_mounted_where_the_flag_points(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    for name in ("arena-green", "arena-green-worker"):
        workload = of_kind(objects, *WORKLOADS)[name]
        pod = workload["spec"]["template"]["spec"]
        container = containers(workload)[0]
        key_file = flag(agent_argv(container), "--pool-key-file")
        directory, file_name = posixpath.split(key_file)
        mounts = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
        assert len(mounts) == 1 and mounts[0]["readOnly"] is True, name
        volume = next(v for v in pod["volumes"] if v["name"] == mounts[0]["name"])
        secret = volume["secret"]
        assert secret["secretName"] == "arena-pool-key"
        assert [item["path"] for item in secret["items"]] == [file_name]
        assert secret["defaultMode"] == 0o440 and pod["securityContext"]["fsGroup"] == IMAGE_USER, name
        assert "POOL_KEY" not in str(container.get("env")), f"{name}: the key never travels in the environment"


def test_pods_run_as_the_images_user_and_workers_are_sized(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    for name, workload in of_kind(objects, "Deployment").items():
        security = workload["spec"]["template"]["spec"]["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] == IMAGE_USER, name
    worker = containers(of_kind(objects, "Deployment")["arena-green-worker"])[0]
    resources = worker["resources"]
    assert resources["requests"]["cpu"] == "1", "one pool member is one event loop: a core each"
    assert "cpu" not in resources.get("limits", {}), "CFS throttling would starve tool calls"
    assert resources["requests"]["memory"] and resources["limits"]["memory"]


def _serves_get(app: Any, path: str) -> bool:
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [], "query_string": b""}
    return any(route.matches(scope)[0] == Match.FULL for route in app.routes)


def test_probes_ask_routes_the_apps_serve(objects: dict[tuple[str, str], dict[str, Any]], tmp_path: Path) -> None:
    from battle_backend import BackendSettings, create_app
    from green_agent.service.a2a_server import create_app as create_green_app

    apps = {
        "arena-backend": create_app(BackendSettings(db_path=tmp_path / "b.sqlite3")),
        "arena-green": create_green_app("http://arena-green:9006", runs_dir=tmp_path),
        "arena-green-worker": create_green_app("http://arena-green-worker:9006", runs_dir=tmp_path),
    }
    for name, app in apps.items():
        container = containers(of_kind(objects, *WORKLOADS)[name])[0]
        named = {port["name"]: port["containerPort"] for port in container["ports"]}
        probes = [container[key] for key in ("readinessProbe", "livenessProbe") if key in container]
        assert "readinessProbe" in container, name
        for probe in probes:
            get = probe["httpGet"]
            assert named[get["port"]] == int(flag(agent_argv(container), "--port")), name
            assert _serves_get(app, get["path"]), f"{name}: nothing serves GET {get['path']}"
    backend = containers(of_kind(objects, "Deployment")["arena-backend"])[0]
    assert backend["readinessProbe"]["httpGet"]["path"] == "/health"
    assert {item["name"] for item in backend["env"]} == {"PGPASSWORD"}
    assert backend["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "arena-postgres", "key": "password"}


def test_no_secret_value_is_written_and_the_docs_create_the_secrets_the_manifests_use(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    for path in K8S.glob("*.yaml"):
        assert not SECRET_VALUE.search(path.read_text(encoding="utf-8")), path
    used = {ref["name"] for doc in manifests() for ref in _secret_refs(doc) if not ref.get("optional", False)}
    assert used == {"arena-postgres", "arena-pool-key"}
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    for name in used:
        assert f"kubectl create secret generic {name}" in doc, name
    for path in K8S.glob("*.yaml"):
        assert f"deploy/k8s/{path.name}" in doc, f"docs/deploy.md does not name {path.name}"


def _secret_refs(node: Any) -> list[dict[str, Any]]:
    refs: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "secretKeyRef" in node:
            refs.append(node["secretKeyRef"])
        if "secret" in node and isinstance(node["secret"], dict):
            refs.append({"name": node["secret"]["secretName"]})
        for value in node.values():
            refs += _secret_refs(value)
    elif isinstance(node, list):
        for value in node:
            refs += _secret_refs(value)
    return refs
