"""The session core's response part (orchestrator/session/core_responses.py), rule by rule."""

from __future__ import annotations

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import PCMU, SessionConfig
from orchestrator.session.actions import CancelBackend, InferenceRequest
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.core_responses import Responses
from orchestrator.session.envelope import Envelope
from orchestrator.session.inputs import BackendAudio, BackendText
from statecharts import effects as fx
from statecharts import response_events as rev


def _part(settings: SessionConfig | None = None) -> tuple[Responses, Outbox]:
    out = Outbox(Envelope("s"))
    config = settings or SessionConfig()
    return Responses(out, Ids("s", lambda _: False), lambda: config), out


def _request(*modalities: str) -> InferenceRequest:
    return InferenceRequest("", (), modalities or ("audio",), None)  # type: ignore[arg-type]


def test_rule1_a_response_is_live_from_open_until_its_chart_is_terminal() -> None:
    part, _ = _part()
    rid, seq = part.issue()
    live = part.open(rid, seq, _request(), in_conversation=True)
    assert part.live[rid] is live
    asks = list(part.feed(rid, rev.Start()))
    assert [type(effect) for _, effect in asks] == [fx.OpenStream]
    list(part.feed(rid, rev.Cancel("client_cancelled")))
    assert rid not in part.live
    assert list(part.feed(rid, rev.Start())) == []  # not live: nothing to feed


def test_rule2_the_fence_admits_only_the_open_number_of_a_live_response() -> None:
    part, _ = _part()
    rid, seq = part.issue()
    live = part.open(rid, seq, _request(), in_conversation=True)
    list(part.feed(rid, rev.Start()))
    assert part.admit(BackendText(rid, seq, "hi")) is live
    assert part.admit(BackendText(rid, seq + 1, "hi")) is None  # not its number
    assert part.admit(BackendText("resp_other", seq, "hi")) is None  # not live
    part.close(seq)
    assert part.admit(BackendText(rid, seq, "hi")) is None  # closed
    held_rid, held_seq = part.issue()  # a held preemptive stream: numbered, never opened
    assert held_seq > seq and held_rid != rid
    assert part.admit(BackendText(held_rid, held_seq, "hi")) is None  # not live


def test_rule2_response_done_and_a_cancelled_stream_close_the_fence() -> None:
    part, _ = _part()
    rid, seq = part.issue()
    part.open(rid, seq, _request(), in_conversation=True)
    list(part.feed(rid, rev.Start()))
    effects = [effect for _, effect in part.feed(rid, rev.Cancel("client_cancelled"))]
    assert fx.CancelBackend(rid, seq) in effects
    assert any(isinstance(effect, fx.SendResponseDone) for effect in effects)
    assert not part.fence.admits(seq)


def test_rule3_the_request_falls_back_to_the_session_settings() -> None:
    settings = SessionConfig(instructions="be brief", max_output_tokens=40)
    part, _ = _part(settings)
    request = part.request(None, (), (), "auto")
    assert request.instructions == "be brief"
    assert request.output_modalities == ("audio",)
    assert request.max_output_tokens == 40
    params = ce.ResponseParams(
        output_modalities=("text",), instructions="", max_output_tokens="inf", metadata={"a": "b"}
    )
    request = part.request(params, (), (), "none")
    assert (request.instructions, request.output_modalities) == ("", ("text",))
    assert request.max_output_tokens is None  # `inf`: no limit
    assert request.metadata == {"a": "b"} and request.tool_choice == "none"


def test_rule4_audio_counts_pcm16_ms_and_is_sent_in_the_output_format() -> None:
    part, out = _part(SessionConfig(output_format=PCMU))
    rid, seq = part.issue()
    live = part.open(rid, seq, _request(), in_conversation=True)
    assert live.encoder is not None  # one streaming encoder per G.711 response
    assert part.speak(live, BackendAudio(rid, seq, b"\x00\x01" * 480, "hel")) == 20
    assert live.audio_ms == 20 and live.text_parts == ["hel"] and not live.unaligned_text
    deltas = [e for e in out.flush().events if isinstance(e, se.ResponseOutputAudioDelta)]
    assert deltas  # G.711: one byte a sample at 8 kHz
    assert part.speak(live, BackendText(rid, seq, "lo")) == 0
    assert live.unaligned_text  # text no audio carries: heard only with the whole reply
    list(part.feed(rid, rev.Start()))
    list(part.feed(rid, rev.Cancel("client_cancelled")))
    assert live.encoder is None  # dropped at its response.done


def test_rule4_chunks_of_part_ms_add_up_to_the_whole_ms_of_their_samples() -> None:
    """A voice whose chunks are not whole ms (Piper's, resampled): 10 chunks of 130 samples
    are 1300 samples, 54 ms, not 10 x 5 (a client that counts samples acks 54)."""
    part, _ = _part()
    rid, seq = part.issue()
    live = part.open(rid, seq, _request(), in_conversation=True)
    sent = [part.speak(live, BackendAudio(rid, seq, b"\x00\x01" * 130, "")) for _ in range(10)]
    assert sum(sent) == live.audio_ms == 1300 * 1000 // 24000


def test_rule4_text_of_a_text_response_is_not_unaligned() -> None:
    part, _ = _part()
    rid, seq = part.issue()
    live = part.open(rid, seq, _request("text"), in_conversation=True)
    assert live.encoder is None
    part.speak(live, BackendText(rid, seq, "hi"))
    assert not live.unaligned_text and part.done(live, 3) == "hi"
    assert live.output_tokens == 3


def test_rule5_forgetting_a_generating_response_cancels_its_stream() -> None:
    part, _ = _part()
    rid, seq = part.issue()
    part.open(rid, seq, _request(), in_conversation=True)
    list(part.feed(rid, rev.Start()))
    assert part.forget(rid) == CancelBackend(rid, seq)
    assert rid not in part.live and not part.fence.admits(seq)
    assert part.forget(rid) is None  # already gone
