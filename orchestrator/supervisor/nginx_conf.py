"""deploy/nginx.conf rendered for N workers: which worker a connection goes to.

Rules (pure: no processes, no files but the template's read):
1. A connection whose `?session_id=` is `sess_<route>_...` of a known route goes to that
   worker's upstream; the other workers are its `backup`s, so a resume of a dead worker's
   session still reaches a live one (which takes the session over from a shared session
   store, or without one answers `session_resume_failed` and a fresh session). Only known
   route ids are in the map: any other upstream name would make nginx look it up in DNS.
2. Every other connection goes to the pool of all workers, `least_conn`.
3. nginx keeps no failure state (`max_fails=0`): every connection tries its worker first,
   and one refused (the worker is dead or restarting) or answered 503 (it drains) goes on to
   the next at once. On loopback a refused connect costs microseconds; with failure state
   (`max_fails=1`) a drain's 503s and a restart's refusals took live workers out for their
   fail_timeout, and in the rolling-restart soak (bench/restart_soak.py) a route's every
   worker was out at once: "no live upstreams", resumes refused for up to 12 s.
4. Without API keys nginx itself admits loopback clients only: behind it every client looks
   like loopback to the workers.
5. Route ids are letters and digits and differ, which also keeps the map's regex and the
   upstream names free of metacharacters.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
POOL_UPSTREAM = "turntaker_all_workers"

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class Backend:
    """One worker as nginx sees it."""

    route_id: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{bracket_host(self.host)}:{self.port}"

    @property
    def upstream(self) -> str:
        return f"turntaker_{self.route_id}"


def read_template(path: Path = TEMPLATE) -> str:
    return path.read_text()


def render_nginx_conf(
    template: str,
    backends: Sequence[Backend],
    host: str,
    port: int,
    *,
    loopback_only: bool,
    worker_connections: int = 1024,
) -> str:
    """deploy/nginx.conf with its placeholders filled (the template's header says which)."""
    if not backends:
        raise ValueError("at least one worker is needed")
    names = [b.route_id for b in backends]
    for name in names:
        if not name.isalnum():
            # Also what keeps the map's regex and the upstream names free of metacharacters.
            raise ValueError(f"route ids are letters and digits, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"route ids must differ, got {names}")
    values = {
        "listen": f"{bracket_host(host)}:{port}",
        "worker_connections": str(worker_connections),
        "routes": "|".join(names),
        "upstreams": _upstreams(backends),
        "access": _access(loopback_only),
    }

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"unknown placeholder {match.group(0)} in the nginx template")
        return values[name]

    missing = [name for name in values if "{{" + name + "}}" not in template]
    if missing:
        raise ValueError(f"the nginx template lacks the placeholders {missing}")
    return _PLACEHOLDER.sub(fill, template)


def _upstreams(backends: Sequence[Backend]) -> str:
    def server(backend: Backend, *extra: str) -> str:
        # Rule 3: no failure state; a failed try goes on to the next worker.
        options = " ".join(("max_fails=0", *extra))
        return f"        server {backend.address} {options};"

    blocks = [
        "\n".join(
            [
                f"    upstream {POOL_UPSTREAM} {{",
                "        least_conn;",
                *(server(b) for b in backends),
                "    }",
            ]
        )
    ]
    for backend in backends:
        # The others as backup: a resume of a dead worker's session still reaches a live one.
        others = [server(b, "backup") for b in backends if b is not backend]
        lines = [f"    upstream {backend.upstream} {{", server(backend), *others, "    }"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _access(loopback_only: bool) -> str:
    if not loopback_only:
        return "        # API keys are configured: the workers check them."
    return "\n".join(
        [
            "        # No API keys: the workers admit loopback clients only, and through nginx",
            "        # every client looks like loopback to them, so the rule is kept here.",
            "        allow 127.0.0.0/8;",
            "        allow ::1;",
            "        deny all;",
        ]
    )


def find_nginx() -> Path | None:
    # Debian puts it in /usr/sbin, which is not on every user's PATH.
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    return Path(found) if found else None


def bracket_host(host: str) -> str:
    """An address as it goes before `:port` (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host
