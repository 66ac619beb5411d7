"""The pure parts of `turntaker serve --workers N` (orchestrator/supervisor/workers.py): route ids,
ports, a worker's command line and the rendered deploy/nginx.conf. No processes here;
test_nginx_workers.py runs the real thing.
"""

from __future__ import annotations

import re

import pytest

from orchestrator.cli import build_parser
from orchestrator.supervisor.nginx_conf import (
    POOL_UPSTREAM,
    Backend,
    read_template,
    render_nginx_conf,
)
from orchestrator.supervisor.workers import dial_host, route_ids, worker_command, worker_ports

BACKENDS = [Backend("w0", "127.0.0.1", 8001), Backend("w1", "127.0.0.1", 8002)]


def _render(backends: list[Backend] = BACKENDS, *, loopback_only: bool = True) -> str:
    return render_nginx_conf(
        read_template(), backends, "127.0.0.1", 8000, loopback_only=loopback_only
    )


def _block(conf: str, name: str) -> list[str]:
    """The `server` lines of `upstream name { ... }`."""
    found = re.search(rf"upstream {name} \{{\n(.*?)\n\s*\}}", conf, re.DOTALL)
    assert found, f"no upstream {name}"
    return [line.strip() for line in found.group(1).splitlines()]


def test_route_ids_and_ports_follow_the_listen_port() -> None:
    assert route_ids(3) == ["w0", "w1", "w2"]
    assert route_ids(2, "eu1") == ["eu1w0", "eu1w1"]
    assert worker_ports(8000, 3) == [8001, 8002, 8003]
    with pytest.raises(ValueError):
        route_ids(0)
    with pytest.raises(ValueError):
        route_ids(2, "e-u")
    with pytest.raises(ValueError):
        worker_ports(65534, 2)


def test_each_worker_upstream_holds_it_first_and_the_others_as_backup() -> None:
    conf = _render([*BACKENDS, Backend("w2", "127.0.0.1", 8003)])
    assert _block(conf, "turntaker_w1") == [
        "server 127.0.0.1:8002 max_fails=0;",
        "server 127.0.0.1:8001 max_fails=0 backup;",
        "server 127.0.0.1:8003 max_fails=0 backup;",
    ]
    pool = _block(conf, POOL_UPSTREAM)
    assert pool[0] == "least_conn;"
    assert [line.split()[1] for line in pool[1:]] == [
        "127.0.0.1:8001",
        "127.0.0.1:8002",
        "127.0.0.1:8003",
    ]
    assert not any("backup" in line for line in pool)


def test_the_session_id_map_names_only_known_routes() -> None:
    conf = _render()
    assert f"default                      {POOL_UPSTREAM};" in conf
    assert '"~^sess_(w0|w1)_"   turntaker_$1;' in conf
    assert "map $arg_session_id $turntaker_upstream" in conf
    # Every routed name has its upstream block.
    for backend in BACKENDS:
        assert f"upstream {backend.upstream} {{" in conf


def test_websocket_proxying_and_the_prefix_paths() -> None:
    conf = _render()
    assert "listen 127.0.0.1:8000;" in conf
    realtime = conf.split("location = /v1/realtime {")[1].split("}")[0]
    assert "proxy_read_timeout 3600s;" in realtime
    assert "proxy_send_timeout 3600s;" in realtime
    for line in (
        "proxy_http_version 1.1;",
        "proxy_set_header Upgrade $http_upgrade;",
        "proxy_set_header Connection $connection_upgrade;",
        "proxy_set_header Host $http_host;",
        "proxy_buffering off;",
        "proxy_next_upstream error timeout http_503;",
        "worker_processes 1;",
    ):
        assert line in conf, line
    for path in ("/healthz", "/readyz", "/metrics", "/"):
        assert f"location = {path} " in conf
    assert "location /static/ " in conf
    # Relative paths: inside nginx's -p prefix, never /var.
    for directive in ("pid", "error_log", *(f"{k}_temp_path" for k in _TEMPS)):
        value = re.search(rf"^\s*{directive} (\S+)", conf, re.MULTILINE)
        assert value and not value.group(1).startswith("/"), directive
    assert "{{" not in conf


_TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def test_without_api_keys_nginx_keeps_the_loopback_only_rule() -> None:
    def rules(conf: str) -> list[str]:
        return re.findall(r"^\s*((?:allow|deny) \S+;)", conf, re.MULTILINE)

    assert rules(_render(loopback_only=True)) == ["allow 127.0.0.0/8;", "allow ::1;", "deny all;"]
    assert rules(_render(loopback_only=False)) == []


def test_ipv6_addresses_are_bracketed() -> None:
    conf = render_nginx_conf(
        read_template(), [Backend("w0", "::1", 9001)], "::1", 9000, loopback_only=True
    )
    assert "listen [::1]:9000;" in conf
    assert "server [::1]:9001 max_fails=0" in conf
    assert dial_host("0.0.0.0") == "127.0.0.1"
    assert dial_host("::") == "::1"
    assert dial_host("10.0.0.5") == "10.0.0.5"


def test_bad_route_ids_and_templates_are_refused() -> None:
    with pytest.raises(ValueError, match="letters and digits"):
        _render([Backend("w0|x", "127.0.0.1", 8001)])
    with pytest.raises(ValueError, match="differ"):
        _render([BACKENDS[0], BACKENDS[0]])
    with pytest.raises(ValueError, match="lacks"):
        render_nginx_conf("events {}", BACKENDS, "127.0.0.1", 8000, loopback_only=True)
    with pytest.raises(ValueError, match="unknown placeholder"):
        render_nginx_conf(
            read_template() + "{{nope}}", BACKENDS, "127.0.0.1", 8000, loopback_only=True
        )


def test_a_worker_gets_its_address_route_and_triton_and_the_users_flags() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--workers",
            "2",
            "--port",
            "9000",
            "--host",
            "0.0.0.0",
            "--pipeline",
            "null",
            "--config",
            "svc.toml",
            "--api-keys-file",
            "keys.txt",
            "--allow-origin",
            "http://a.example",
            "--allow-origin",
            "http://b.example",
            "--max-sessions-per-key",
            "7",
            "--append-bytes-per-s-per-key",
            "1000",
            "--weights",
            "/w",
            "--model-repository",
            "/repo",
        ]
    )
    command = worker_command(
        args,
        python="/py",
        backend=Backend("w1", "127.0.0.1", 9002),
        triton_urls=("127.0.0.1:1", "127.0.0.1:2"),
    )
    assert command[:4] == ["/py", "-m", "orchestrator.cli", "serve"]
    pairs = list(zip(command[4::2], command[5::2], strict=True))
    assert pairs == [
        ("--host", "127.0.0.1"),
        ("--port", "9002"),
        ("--route-id", "w1"),
        ("--triton-url", "127.0.0.1:1"),
        ("--triton-url", "127.0.0.1:2"),
        ("--config", "svc.toml"),
        ("--pipeline", "null"),
        ("--api-keys-file", "keys.txt"),
        ("--max-sessions-per-key", "7"),
        ("--append-bytes-per-s-per-key", "1000"),
        ("--allow-origin", "http://a.example"),
        ("--allow-origin", "http://b.example"),
    ]
    # What the worker parses back: the same parser, the supervisor's own flags not carried.
    back = build_parser().parse_args(command[3:])
    assert back.workers == 1
    assert back.route_id == "w1"
    assert back.omni_weights is None and back.model_repository is None


def test_unset_flags_are_left_to_the_workers_own_defaults() -> None:
    args = build_parser().parse_args(["serve", "--workers", "2"])
    command = worker_command(args, python="py", backend=BACKENDS[0], triton_urls=("127.0.0.1:1",))
    assert command[4:] == [
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--route-id",
        "w0",
        "--triton-url",
        "127.0.0.1:1",
    ]
