"""Access control: who may open a realtime session, and how much audio each API key may send.

Pure logic: no I/O, no Trio, the clock is injected. The app asks, this module decides.

Rules (what it guarantees):
1. Keys. API keys come from a keys file (one per line, `#` comment lines, optional
   `name:key`) and/or `TURNTAKER_API_KEYS` (comma-separated, same forms). Every key has a
   name and metrics, logs and error messages carry only the name (`name:key`, else its place:
   `file:3` for line 3, `env:1` for the first entry), never the key.
2. Constant time. A presented key is compared with every configured key, with no early exit,
   by `hmac.compare_digest` over SHA-256 digests: the time taken depends neither on which key
   matched (if any) nor on the presented key's length.
3. Credentials: `Authorization: Bearer KEY`, else the `openai-insecure-api-key.KEY` WebSocket
   subprotocol (browsers cannot set headers). The header wins when both are sent.
4. Origin, checked first (so a foreign page learns nothing about keys): a request without
   `Origin` (not a browser) passes; with one, it must be on the allow list (`*`: any origin),
   or, with an empty list, name the host the request was sent to (its `Host` header).
5. Loopback. With no keys configured only loopback clients (127.0.0.0/8, ::1, and v4-mapped
   forms) are admitted, all as one `anonymous` identity; a key they send is ignored.
6. Sessions: at most `max_sessions_per_key` open at once per identity (0: no limit). An
   admission holds a `Lease`; releasing it (idempotent) frees the slot. A connection that
   comes to resume one of its identity's sessions now in its grace (the caller's `resuming`)
   is admitted past the limit: the session it resumes holds a slot already, and its own is
   freed when the resume succeeds (docs/protocol.md "Session resume").
7. Append rate, per identity (shared by all its sessions, kept across reconnects): a token
   bucket over decoded `input_audio_buffer.append` audio bytes, refilled at
   `append_bytes_per_s` up to `append_bytes_per_s * append_burst_s`. An append passes when the
   bucket holds at least its size, or is full; it then takes its whole size, possibly into
   debt, so one append larger than the burst still passes, and over any interval T at most
   burst + rate*T + one message passes. 0: no limit.
8. Refusals are typed: `Refused` carries the WebSocket close code (1008 policy violation for a
   missing or wrong key, a foreign origin and a non-loopback client without keys; 1013 try
   again later for too many sessions), the HTTP status for plain requests, a reason that fits
   a close frame (123 bytes), and `reason`, the metrics label and error code.

Not thread-safe: one event loop owns an `AccessControl`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from orchestrator.service.config import ServiceConfig

Clock = Callable[[], float]

ANONYMOUS = "anonymous"
SUBPROTOCOL_KEY_PREFIX = "openai-insecure-api-key."
# RFC 6455 5.5: a control frame's payload is at most 125 bytes, 2 of them the close code.
MAX_CLOSE_REASON_BYTES = 123

POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013

RefusalReason = Literal[
    "missing_api_key",
    "invalid_api_key",
    "origin_not_allowed",
    "loopback_only",
    "session_limit_reached",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


class KeysError(ValueError):
    """A keys file or list that cannot be used; the message never contains a key."""


@dataclass(frozen=True)
class ApiKey:
    name: str
    # Only the digest is kept: comparisons take the same time whatever the key's length.
    digest: bytes = field(repr=False)

    @classmethod
    def of(cls, name: str, secret: str) -> ApiKey:
        return cls(name, _digest(secret))


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _parse_entry(entry: str, default_name: str, where: str) -> ApiKey:
    if any(c.isspace() for c in entry):
        raise KeysError(f"{where}: a key must not contain whitespace")
    name, colon, secret = entry.partition(":")
    if not colon:
        name, secret = default_name, entry
    elif not _NAME.fullmatch(name):
        raise KeysError(f"{where}: the name before ':' must match {_NAME.pattern}")
    if not secret:
        raise KeysError(f"{where}: empty key")
    if name == ANONYMOUS:
        raise KeysError(f"{where}: the name {ANONYMOUS!r} is reserved for loopback clients")
    return ApiKey.of(name, secret)


def parse_keys_file(text: str, *, source: str = "file") -> tuple[ApiKey, ...]:
    """One key per line, `name:key` or a bare key (named `{source}:{line}`); `#` comments."""
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        if entry and not entry.startswith("#"):
            keys.append(_parse_entry(entry, f"{source}:{number}", f"{source} line {number}"))
    return tuple(keys)


def parse_key_list(entries: Iterable[str], *, source: str = "env") -> tuple[ApiKey, ...]:
    """Entries of a comma-separated list (`TURNTAKER_API_KEYS`), each `name:key` or a key."""
    stripped = [e.strip() for e in entries]
    return tuple(
        _parse_entry(e, f"{source}:{n}", f"{source} entry {n}")
        for n, e in enumerate((e for e in stripped if e), start=1)
    )


def _normalize_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def validate_origin(origin: str) -> str:
    """An allow-list entry: `*`, `null`, or `scheme://host[:port]` (what browsers send)."""
    normal = _normalize_origin(origin)
    if normal in ("*", "null"):
        return normal
    parts = urlsplit(normal)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path or parts.query:
        raise ValueError(
            f"--allow-origin {origin!r}: expected '*' or scheme://host[:port], "
            "e.g. http://localhost:8000"
        )
    return normal


@dataclass(frozen=True)
class AccessSettings:
    keys: tuple[ApiKey, ...] = ()
    # Empty: same-host origins only. `*`: any.
    allow_origins: tuple[str, ...] = ()
    max_sessions_per_key: int = 100
    append_bytes_per_s: int = 8 * 1024 * 1024
    append_burst_s: float = 4.0

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "allow_origins", tuple(validate_origin(o) for o in self.allow_origins)
        )
        names = [k.name for k in self.keys]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise KeysError(f"API key names used more than once: {twice}")
        digests = [k.digest for k in self.keys]
        if len(set(digests)) != len(digests):
            raise KeysError("the same API key is configured more than once")
        if self.max_sessions_per_key < 0 or self.append_bytes_per_s < 0:
            raise ValueError("session and append limits must be >= 0 (0: no limit)")
        if self.append_burst_s <= 0:
            raise ValueError("append_burst_s must be > 0")


def settings_from_config(config: ServiceConfig, keys_file_text: str | None) -> AccessSettings:
    """The keys file's text is read by the caller (this module does no I/O)."""
    keys: tuple[ApiKey, ...] = ()
    if keys_file_text is not None:
        keys += parse_keys_file(keys_file_text, source="file")
    keys += parse_key_list(config.api_keys, source="env")
    return AccessSettings(
        keys=keys,
        allow_origins=config.allow_origins,
        max_sessions_per_key=config.max_sessions_per_key,
        append_bytes_per_s=config.append_bytes_per_s_per_key,
        append_burst_s=config.append_burst_s,
    )


@dataclass(frozen=True)
class Handshake:
    """What the checks see of a request: the peer address and the handshake's headers."""

    client_host: str | None
    # Looked up by lower-case name (Starlette's Headers are case-insensitive anyway).
    headers: Mapping[str, str]
    subprotocols: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    name: str

    @property
    def anonymous(self) -> bool:
        return self.name == ANONYMOUS


@dataclass(frozen=True)
class Refused:
    reason: RefusalReason
    message: str
    close_code: int
    http_status: int
    # Known only when the key was good and a limit refused it.
    identity: Identity | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", _fit_close_reason(self.message))


def _fit_close_reason(text: str) -> str:
    raw = text.encode()
    if len(raw) <= MAX_CLOSE_REASON_BYTES:
        return text
    return raw[: MAX_CLOSE_REASON_BYTES - 3].decode(errors="ignore") + "..."


class TokenBucket:
    """Bytes per second with a burst; see rule 7 for the debt that lets one big message by."""

    def __init__(self, rate: float, capacity: float, clock: Clock) -> None:
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = capacity
        self._stamp = clock()

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._stamp)
        self._stamp = now
        self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)

    def take(self, amount: int) -> bool:
        self._refill()
        if self._tokens < min(amount, self.capacity):
            return False
        self._tokens -= amount
        return True


class _KeyState:
    __slots__ = ("bucket", "sessions")

    def __init__(self, bucket: TokenBucket | None) -> None:
        self.sessions = 0
        self.bucket = bucket


class Lease:
    """One admitted session's hold on its identity's limits; `release()` when it ends."""

    def __init__(self, identity: Identity, state: _KeyState) -> None:
        self.identity = identity
        self._state = state
        self._released = False

    def take_append(self, nbytes: int) -> bool:
        """Charge `nbytes` of decoded append audio; False: over the rate, drop the append."""
        bucket = self._state.bucket
        return bucket is None or bucket.take(nbytes)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._state.sessions -= 1


@dataclass(frozen=True)
class Admitted:
    identity: Identity
    lease: Lease


class AccessControl:
    def __init__(self, settings: AccessSettings, *, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        # Bounded: one entry per configured key, plus `anonymous`.
        self._states: dict[str, _KeyState] = {}

    @property
    def keys_required(self) -> bool:
        return bool(self.settings.keys)

    def sessions(self, identity: str) -> int:
        state = self._states.get(identity)
        return 0 if state is None else state.sessions

    def admit(
        self, request: Handshake, resuming: Callable[[str], bool] | None = None
    ) -> Admitted | Refused:
        """A realtime session: origin, then credentials, then the identity's session limit
        (`resuming(identity)`: the connection names one of that identity's sessions in its
        grace, rule 6)."""
        refused = self.check_origin(request)
        if refused is not None:
            return refused
        who = self.authenticate(request)
        if isinstance(who, Refused):
            return who
        state = self._state(who.name)
        limit = self.settings.max_sessions_per_key
        if limit and state.sessions >= limit and not (resuming and resuming(who.name)):
            return Refused(
                "session_limit_reached",
                f"too many open sessions for this API key (limit {limit}); try again later",
                TRY_AGAIN_LATER,
                429,
                who,
            )
        state.sessions += 1
        return Admitted(who, Lease(who, state))

    def authenticate(self, request: Handshake) -> Identity | Refused:
        """Credentials alone (also for `/metrics`): a configured key, or loopback if none."""
        if not self.settings.keys:
            if is_loopback(request.client_host):
                return Identity(ANONYMOUS)
            return Refused(
                "loopback_only",
                "no API keys are configured, so only loopback clients are admitted: "
                "set --api-keys-file or TURNTAKER_API_KEYS",
                POLICY_VIOLATION,
                403,
            )
        presented = credential(request)
        if presented is None:
            return Refused(
                "missing_api_key",
                "missing API key: send 'Authorization: Bearer KEY' or the "
                "openai-insecure-api-key.KEY subprotocol",
                POLICY_VIOLATION,
                401,
            )
        name = self._match(presented)
        if name is None:
            return Refused("invalid_api_key", "invalid API key", POLICY_VIOLATION, 401)
        return Identity(name)

    def _match(self, presented: str) -> str | None:
        digest = _digest(presented)
        found: str | None = None
        for key in self.settings.keys:
            # Every key is compared, also after a match: no timing tells which one matched.
            if hmac.compare_digest(digest, key.digest) and found is None:
                found = key.name
        return found

    def check_origin(self, request: Handshake) -> Refused | None:
        origin = request.headers.get("origin")
        if origin is None:
            return None  # not a browser: browsers always send Origin on a WebSocket handshake
        allowed = self.settings.allow_origins
        normal = _normalize_origin(origin)
        if "*" in allowed or normal in allowed:
            return None
        if not allowed and _same_host(normal, request.headers.get("host")):
            return None
        hint = "--allow-origin" if allowed else "same-host origins or --allow-origin"
        return Refused(
            "origin_not_allowed",
            f"origin not allowed (only {hint}): {origin[:60]}",
            POLICY_VIOLATION,
            403,
        )

    def _state(self, name: str) -> _KeyState:
        state = self._states.get(name)
        if state is None:
            rate = self.settings.append_bytes_per_s
            bucket = (
                TokenBucket(rate, rate * self.settings.append_burst_s, self._clock)
                if rate
                else None
            )
            state = self._states[name] = _KeyState(bucket)
        return state


def credential(request: Handshake) -> str | None:
    """The presented key: the Bearer header, else the key subprotocol; None if neither."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        return value if scheme.lower() == "bearer" and value else None
    for offered in request.subprotocols:
        if offered.startswith(SUBPROTOCOL_KEY_PREFIX) and len(offered) > len(
            SUBPROTOCOL_KEY_PREFIX
        ):
            return offered[len(SUBPROTOCOL_KEY_PREFIX) :]
    return None


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS.get(scheme, 0)


def _same_host(origin: str, host: str | None) -> bool:
    """Origin `scheme://host[:port]` names the host and port of the `Host` header."""
    if host is None:
        return False
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS:
        return False  # `null` (sandboxed or file:// pages) and anything odd
    mine = _host_port(host.strip().lower(), parts.scheme)
    theirs = _host_port(parts.netloc, parts.scheme)
    return mine is not None and mine == theirs
