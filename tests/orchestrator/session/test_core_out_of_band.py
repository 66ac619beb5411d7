"""Out-of-band responses, `response.input` and `metadata` (docs/protocol.md "Client events"),
through the codec and the session core in memory, as the session actor drives them."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.protocol.codec import decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.actions import StartBackend
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import BackendAudio, BackendDone
from tests.orchestrator.session.test_core_tools import Session as ToolSession

MANUAL = {"audio": {"input": {"turn_detection": None}}}
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}


class Session(ToolSession):
    """A manual-turn session driven through the codec
    (tests/orchestrator/session/test_core_tools.py)."""

    def __init__(self) -> None:
        super().__init__(audio=MANUAL["audio"])

    def respond(self, **response: Any) -> StartBackend:
        step = self.send("response.create", response=response)
        [start] = [a for a in step.actions if isinstance(a, StartBackend)]
        return start

    def speak(self, start: StartBackend, text: str = "Sure. ") -> None:
        rid, seq = start.response_id, start.seq
        self.backend(BackendAudio(rid, seq, b"\0\0" * 24 * 100, text))
        self.backend(BackendDone(rid, seq, 2))


def test_out_of_band_response_runs_but_nothing_of_it_enters_the_conversation() -> None:
    s = Session()
    s.send("conversation.item.create", item=USER)
    before = [item.id for item in s.core.conversation.items]
    mark = len(s.wire)
    start = s.respond(conversation="none", metadata={"purpose": "summary"})
    s.speak(start)
    kinds = [e["type"] for e in s.wire[mark:]]
    assert "response.output_item.added" in kinds and "response.output_audio.delta" in kinds
    assert not [k for k in kinds if k.startswith("conversation.item.")], kinds
    created = s.wire[mark]
    done = next(e for e in s.wire[mark:] if e["type"] == "response.done")
    assert created["response"]["conversation_id"] is None
    assert done["response"]["conversation_id"] is None
    assert created["response"]["metadata"] == done["response"]["metadata"] == {"purpose": "summary"}
    assert done["response"]["status"] == "completed"
    assert [item.id for item in s.core.conversation.items] == before  # no reply slot, no history
    # Its prompt was the conversation's.
    assert [item.id for item in start.request.items] == before


def test_response_input_is_the_whole_prompt_with_references_to_conversation_items() -> None:
    s = Session()
    s.send("conversation.item.create", item={**USER, "id": "u1"})
    s.send("conversation.item.create", item={**USER, "id": "u2"})
    own = {
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": "Classify the user's words."}],
    }
    start = s.respond(conversation="none", input=[own, {"type": "item_reference", "id": "u1"}])
    items = start.request.items
    assert [item.role for item in items] == ["system", "user"]
    assert items[0].content == (conv.InputText("Classify the user's words."),)
    assert items[1].id == "u1"
    assert "Classify" not in json.dumps([conv.item_json(i) for i in s.core.conversation.items])


def test_in_band_response_on_its_own_input_still_lands_in_the_conversation() -> None:
    s = Session()
    s.send("conversation.item.create", item={**USER, "id": "u1"})
    start = s.respond(input=[])
    assert start.request.items == ()
    s.speak(start)
    assert [i.role for i in s.core.conversation.items] == ["user", "assistant"]


def test_an_unknown_item_reference_is_told_and_starts_nothing() -> None:
    s = Session()
    step = s.send(
        "response.create",
        response={"input": [{"type": "item_reference", "id": "nope"}]},
    )
    errors = [e for e in s.wire if e["type"] == "error"]
    assert [(e["error"]["code"], e["error"]["param"]) for e in errors] == [
        ("item_not_found", "response.input[0].id")
    ]
    assert not [a for a in step.actions if isinstance(a, StartBackend)]
    assert not s.core.chart.is_generating


def test_a_bad_input_item_is_a_precise_parse_error() -> None:
    raw = {"type": "response.create", "response": {"input": [{"type": "message", "role": "user"}]}}
    err = decode_client_event(json.dumps(raw))
    assert isinstance(err, ProtocolError)
    assert (err.code, err.param) == ("missing_required_parameter", "response.input[0].content")
