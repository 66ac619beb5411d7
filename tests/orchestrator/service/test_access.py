"""Access rules (orchestrator/service/access.py), pure: no server, a fake clock."""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Callable
from typing import Any

import pytest
import trio

from orchestrator.service import access
from orchestrator.service.access import (
    ANONYMOUS,
    AccessControl,
    AccessSettings,
    Admitted,
    ApiKey,
    Handshake,
    KeysError,
    Refused,
    TokenBucket,
    credential,
    is_loopback,
    parse_key_list,
    parse_keys_file,
    settings_from_config,
)
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.response_actor import ResponseServices
from orchestrator.service.config import ServiceConfig, load_config
from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.services import SessionServices
from tests.orchestrator.service.sessions.in_memory import in_memory_session


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


KEYS = (ApiKey.of("alice", "sk-alice"), ApiKey.of("bob", "sk-bob"), ApiKey.of("carol", "sk-c"))


def control(clock: Callable[[], float] | None = None, **settings: object) -> AccessControl:
    base: dict[str, object] = {"keys": KEYS}
    base.update(settings)
    return AccessControl(AccessSettings(**base), clock=clock or FakeClock())  # type: ignore[arg-type]


def hello(
    key: str | None = None,
    *,
    host: str | None = "127.0.0.1",
    origin: str | None = None,
    host_header: str = "127.0.0.1:8000",
    subprotocols: tuple[str, ...] = (),
) -> Handshake:
    headers = {"host": host_header}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    if origin is not None:
        headers["origin"] = origin
    return Handshake(client_host=host, headers=headers, subprotocols=subprotocols)


def admitted(decision: Admitted | Refused) -> Admitted:
    assert isinstance(decision, Admitted), decision
    return decision


def refused(decision: Admitted | Refused | object) -> Refused:
    assert isinstance(decision, Refused), decision
    return decision


# Keys ---------------------------------------------------------------------------------
def test_keys_file_names_comments_and_positions() -> None:
    text = "# team keys\n\nalice:sk-alice\n  sk-bare  \n# old:sk-old\nci.bot-2:sk:with:colons\n"
    keys = parse_keys_file(text)
    assert [k.name for k in keys] == ["alice", "file:4", "ci.bot-2"]
    assert keys[0] == ApiKey.of("alice", "sk-alice")
    assert keys[1] == ApiKey.of("file:4", "sk-bare")
    # Only the first colon separates the name: the rest belongs to the key.
    assert keys[2] == ApiKey.of("ci.bot-2", "sk:with:colons")


def test_keys_never_appear_in_reprs_or_errors() -> None:
    assert "sk-alice" not in repr(parse_keys_file("alice:sk-alice"))
    assert "sk-secret" not in repr(ServiceConfig(api_keys=("sk-secret",)))
    for text in ("alice:sk-secret extra", "bad name:sk-secret", "alice:"):
        with pytest.raises(KeysError) as raised:
            parse_keys_file(text)
        assert "sk-secret" not in str(raised.value)
    with pytest.raises(KeysError, match="reserved"):
        parse_keys_file("anonymous:sk-x")


def test_duplicate_names_or_keys_are_refused() -> None:
    with pytest.raises(KeysError, match="alice"):
        AccessSettings(keys=parse_keys_file("alice:k1\nalice:k2"))
    with pytest.raises(KeysError, match="more than once") as raised:
        AccessSettings(keys=parse_keys_file("a:same-key\nb:same-key"))
    assert "same-key" not in str(raised.value)


def test_env_list_and_file_combine_through_the_config() -> None:
    config = load_config(env={"TURNTAKER_API_KEYS": "ops:sk-ops, sk-anon-1 ,"})
    assert config.api_keys == ("ops:sk-ops", "sk-anon-1")
    settings = settings_from_config(config, "alice:sk-alice\n")
    assert [k.name for k in settings.keys] == ["alice", "ops", "env:2"]
    assert parse_key_list(["", " x "]) == (ApiKey.of("env:1", "x"),)
    assert settings_from_config(ServiceConfig(), None).keys == ()


def test_every_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(access.hmac, "compare_digest", counting)
    gate = control()
    for key, name in (("sk-alice", "alice"), ("sk-c", "carol"), ("nope", None), ("x" * 500, None)):
        calls.clear()
        who = gate.authenticate(hello(key))
        assert (who.name if not isinstance(who, Refused) else None) == name
        # All three keys, whichever matched (the first, the last, none), and always digests of
        # one length, so neither which key nor the presented length shows in the timing.
        assert len(calls) == len(KEYS)
        assert {len(a) for a, _ in calls} == {len(b) for _, b in calls} == {32}


# Credentials --------------------------------------------------------------------------
def test_credentials_from_bearer_header_or_key_subprotocol() -> None:
    assert credential(hello("sk-1")) == "sk-1"
    assert credential(Handshake("127.0.0.1", {"authorization": "bearer  sk-2 "})) == "sk-2"
    assert credential(Handshake("127.0.0.1", {"authorization": "Basic abc"})) is None
    assert credential(Handshake("127.0.0.1", {"authorization": "Bearer "})) is None
    offered = ("realtime", "openai-insecure-api-key.sk-3")
    assert credential(Handshake("127.0.0.1", {}, offered)) == "sk-3"
    assert credential(Handshake("127.0.0.1", {}, ("openai-insecure-api-key.",))) is None
    # The header wins over the subprotocol.
    assert credential(hello("sk-h", subprotocols=offered)) == "sk-h"


def test_wrong_or_missing_key_is_a_policy_violation() -> None:
    gate = control()
    missing = refused(gate.admit(hello()))
    assert (missing.reason, missing.close_code, missing.http_status) == (
        "missing_api_key",
        1008,
        401,
    )
    assert "Bearer" in missing.message and "openai-insecure-api-key" in missing.message
    wrong = refused(gate.admit(hello("sk-alicf")))
    assert (wrong.reason, wrong.close_code) == ("invalid_api_key", 1008)
    assert "sk-alicf" not in wrong.message
    # Keys configured: loopback is no exemption.
    assert refused(gate.admit(hello(host="127.0.0.1"))).reason == "missing_api_key"
    by_protocol = admitted(
        gate.admit(hello(subprotocols=("realtime", "openai-insecure-api-key.sk-bob")))
    )
    assert by_protocol.identity.name == "bob"


# Loopback -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("192.0.2.2", False),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("2001:db8::1", False),
        ("localhost", False),  # a name is not an address: never trusted
        ("", False),
        (None, False),
    ],
)
def test_loopback_addresses(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_keys_only_loopback_is_admitted_as_one_anonymous_identity() -> None:
    gate = control(keys=())
    local = admitted(gate.admit(hello()))
    assert local.identity.name == ANONYMOUS and local.identity.anonymous
    # A key is ignored (the openai SDK always sends one).
    assert admitted(gate.admit(hello("sk-anything", host="::1"))).identity.name == ANONYMOUS
    assert gate.sessions(ANONYMOUS) == 2
    remote = refused(gate.admit(hello(host="192.0.2.2")))
    assert (remote.reason, remote.close_code, remote.http_status) == ("loopback_only", 1008, 403)
    assert "--api-keys-file" in remote.message and "TURNTAKER_API_KEYS" in remote.message
    assert refused(gate.authenticate(hello(host=None))).reason == "loopback_only"


# Origins ------------------------------------------------------------------------------
def test_no_origin_passes_and_same_host_is_the_default() -> None:
    gate = control(keys=())
    assert gate.check_origin(hello()) is None  # not a browser
    same = hello(origin="http://127.0.0.1:8000", host_header="127.0.0.1:8000")
    assert gate.check_origin(same) is None
    for origin, host_header in (
        ("HTTP://LocalHost:8000/", "localhost:8000"),
        # Default ports: `example.com` is port 80 for http and 443 for https.
        ("https://example.com", "example.com"),
        ("http://example.com:80", "example.com"),
        ("https://example.com", "example.com:443"),
    ):
        assert gate.check_origin(hello(origin=origin, host_header=host_header)) is None, origin
    assert gate.check_origin(hello(origin="http://[::1]:8000", host_header="[::1]:8000")) is None
    for foreign, host_header in (
        ("http://evil.example", "127.0.0.1:8000"),
        ("http://127.0.0.1:9999", "127.0.0.1:8000"),
        ("http://127.0.0.1.evil.example:8000", "127.0.0.1:8000"),
        ("null", "127.0.0.1:8000"),
        ("http://example.com:8080", "example.com"),
    ):
        bad = refused(gate.check_origin(hello(origin=foreign, host_header=host_header)))
        assert (bad.reason, bad.close_code, bad.http_status) == ("origin_not_allowed", 1008, 403)
    # Checked before the key: a foreign page learns nothing about keys.
    assert refused(control().admit(hello("nope", origin="http://evil.example"))).reason == (
        "origin_not_allowed"
    )


def test_allow_list_is_exact_and_star_allows_any() -> None:
    gate = control(allow_origins=("http://localhost:5173", "https://app.example.com/"))
    assert gate.check_origin(hello(origin="http://localhost:5173")) is None
    assert gate.check_origin(hello(origin="https://app.example.com")) is None
    # A list replaces the same-host default.
    assert gate.check_origin(hello(origin="http://127.0.0.1:8000")) is not None
    assert gate.check_origin(hello(origin="http://localhost:5174")) is not None
    anyone = control(allow_origins=("*",))
    assert anyone.check_origin(hello(origin="http://evil.example")) is None
    with pytest.raises(ValueError, match="scheme://host"):
        AccessSettings(allow_origins=("localhost:8000",))
    with pytest.raises(ValueError, match="scheme://host"):
        AccessSettings(allow_origins=("http://localhost:8000/page",))


def test_refusal_reasons_fit_a_close_frame() -> None:
    long_origin = "http://" + "é" * 300 + ".example"
    bad = refused(control().check_origin(hello(origin=long_origin)))
    assert len(bad.message.encode()) <= 123
    assert bad.message.startswith("origin not allowed")


# Limits -------------------------------------------------------------------------------
def test_sessions_per_key_are_limited_and_leases_give_slots_back() -> None:
    gate = control(max_sessions_per_key=2)
    first = admitted(gate.admit(hello("sk-alice")))
    admitted(gate.admit(hello("sk-alice")))
    full = refused(gate.admit(hello("sk-alice")))
    assert (full.reason, full.close_code) == ("session_limit_reached", 1013)
    assert full.identity is not None and full.identity.name == "alice"
    # Another key has its own slots.
    admitted(gate.admit(hello("sk-bob")))
    first.lease.release()
    first.lease.release()  # idempotent: a double release frees one slot, not two
    assert gate.sessions("alice") == 1
    admitted(gate.admit(hello("sk-alice")))
    assert isinstance(gate.admit(hello("sk-alice")), Refused)
    assert admitted(control(max_sessions_per_key=0).admit(hello("sk-c"))).identity.name


def test_rule_6_a_connection_resuming_its_own_session_in_grace_passes_the_limit() -> None:
    gate = control(max_sessions_per_key=1)
    admitted(gate.admit(hello("sk-alice")))  # the session now in its grace holds the slot
    resuming = admitted(gate.admit(hello("sk-alice"), lambda who: who == "alice"))
    assert gate.sessions("alice") == 2
    resuming.lease.release()  # freed when the resume succeeds: the provisional session goes
    assert gate.sessions("alice") == 1
    # Not for another identity's session, and not without one in grace.
    assert refused(gate.admit(hello("sk-alice"), lambda who: who == "bob")).reason == (
        "session_limit_reached"
    )
    assert isinstance(gate.admit(hello("sk-alice"), lambda who: False), Refused)


def test_anonymous_loopback_clients_share_one_session_limit() -> None:
    gate = control(keys=(), max_sessions_per_key=1)
    admitted(gate.admit(hello(host="127.0.0.1")))
    assert refused(gate.admit(hello(host="::1"))).reason == "session_limit_reached"


def test_append_rate_is_a_token_bucket_per_key_with_a_burst() -> None:
    clock = FakeClock()
    gate = control(clock, append_bytes_per_s=1000, append_burst_s=2.0)
    one = admitted(gate.admit(hello("sk-alice"))).lease
    two = admitted(gate.admit(hello("sk-alice"))).lease
    other = admitted(gate.admit(hello("sk-bob"))).lease
    # The burst (2 s worth) is shared by the key's sessions.
    assert one.take_append(1500)
    assert two.take_append(500)
    assert not one.take_append(1) and not two.take_append(1)
    # ...but not with another key.
    assert other.take_append(2000)
    clock.now += 0.25
    assert two.take_append(250) and not two.take_append(1)
    # A refusal costs nothing: after 1 s, 1000 bytes pass.
    clock.now += 1.0
    assert not one.take_append(1001)
    assert one.take_append(1000)
    # The bucket never holds more than the burst, however long the pause.
    clock.now += 3600
    assert one.take_append(2000) and not one.take_append(1)
    # A reconnect does not reset the budget: the bucket belongs to the key.
    one.release()
    three = admitted(gate.admit(hello("sk-alice"))).lease
    assert not three.take_append(1)


def test_one_append_larger_than_the_burst_passes_into_debt() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=1000, capacity=2000, clock=clock)
    assert bucket.take(5000)  # full bucket: a big message passes...
    assert bucket.tokens == -3000
    assert not bucket.take(1)  # ...and the debt is paid back before anything else passes
    clock.now += 3.0
    assert not bucket.take(1)
    clock.now += 0.001
    assert bucket.take(1)


def test_no_append_limit_with_zero() -> None:
    lease = admitted(control(append_bytes_per_s=0).admit(hello("sk-alice"))).lease
    assert all(lease.take_append(10**9) for _ in range(10))


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        AccessSettings(max_sessions_per_key=-1)
    with pytest.raises(ValueError):
        AccessSettings(append_burst_s=0)


# The session's receive path -------------------------------------------------------------
class _QuietVad:
    def open_stream(self) -> object:
        return object()

    async def probability(self, stream: object, chunk: object) -> float:
        return 0.0

    async def probabilities(self, stream: object, chunks: list[object]) -> list[float]:
        return [0.0] * len(chunks)


async def test_an_append_over_the_budget_gets_an_error_and_the_session_goes_on() -> None:
    metrics = Metrics()
    services = SessionServices(
        metrics=metrics,
        vad=_QuietVad(),
        responses=ResponseServices(
            pool=EndpointPool(("127.0.0.1:9",), ("cascade",), metrics),
            pipeline="cascade",
            default_max_tokens=8,
        ),
        transcriber=None,
    )
    charged: list[int] = []

    def budget(nbytes: int) -> bool:
        charged.append(nbytes)
        return len(charged) != 2  # the second append is over the limit

    actor, client = in_memory_session("sess_rate", ServiceConfig(), services, append_budget=budget)
    seen: list[dict[str, Any]] = []

    async def read() -> None:
        async for text in client:
            seen.append(json.loads(text))

    audio = base64.b64encode(bytes(4800)).decode()  # 100 ms of pcm16 at 24 kHz
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)
            nursery.start_soon(read)
            for n in range(3):
                append = {"type": "input_audio_buffer.append", "event_id": f"a{n}", "audio": audio}
                await client.send(json.dumps(append))
            await client.send(json.dumps({"type": "conversation.context.retrieve"}))
            while not any(e["type"] == "conversation.context" for e in seen):
                await trio.sleep(0.01)
            client.leave()
    assert charged == [4800, 4800, 4800], "decoded audio bytes are charged, not base64"
    errors = [e["error"] for e in seen if e["type"] == "error"]
    assert len(errors) == 1, errors
    assert errors[0]["code"] == "rate_limit_exceeded" and errors[0]["event_id"] == "a1"
    assert errors[0]["type"] == "invalid_request_error"
    # The two appends that passed are buffered: 200 ms.
    assert actor.core.buffered_ms == 200
