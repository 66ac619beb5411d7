"""Shared helpers for the protocol tests (imported by module name; not a conftest)."""

from __future__ import annotations

import base64
import json
from typing import Any

from orchestrator.protocol.client import ClientEvent
from orchestrator.protocol.codec import decode_client_event
from orchestrator.protocol.errors import ProtocolError


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def wire(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def parse(obj: dict[str, Any], **kwargs: Any) -> ClientEvent:
    out = decode_client_event(wire(obj), **kwargs)
    assert not isinstance(out, ProtocolError), out
    return out


def reject(data: dict[str, Any] | str | bytes, **kwargs: Any) -> ProtocolError:
    raw = wire(data) if isinstance(data, dict) else data
    out = decode_client_event(raw, **kwargs)
    assert isinstance(out, ProtocolError), out
    return out


# 20 ms of 24 kHz pcm16: 480 samples, 960 bytes.
PCM_20MS = bytes(range(256)) * 3 + bytes(192)
PNG_URL = "data:image/png;base64," + b64(b"\x89PNG\r\n\x1a\n fake image body")
