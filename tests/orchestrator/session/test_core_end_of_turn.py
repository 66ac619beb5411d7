"""SessionCore with semantic_vad (docs/protocol.md "Semantic end of turn and preemptive
responses"), driven in memory: VAD probabilities, the turn model's answers and the caller's
clock."""

from __future__ import annotations

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import SemanticVad, ServerVad, SessionPatch
from orchestrator.session.actions import PredictTurn, Transcribe
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.core_types import TurnEnded
from orchestrator.session.inputs import TranscriptReady, TurnPrediction
from tests.orchestrator.session.core_driver import CoreDriver, of, types


class Session(CoreDriver):
    """A session whose VAD answers every append at once; the clock follows the audio."""

    def __init__(
        self, vad: SemanticVad | ServerVad, *, turn_model: bool = True, transcriber: bool = False
    ) -> None:
        config = CoreConfig(turn_model=turn_model, transcriber=transcriber)
        super().__init__(SessionCore("t", config))
        self.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=vad)))

    def pause(self) -> PredictTurn:
        """Silence until the candidate pause's ask (the VAD's chunks trail the appends)."""
        for _ in range(10):
            asks = of(self.speak(32, 0.0), PredictTurn)
            if asks:
                return asks[0]
        raise AssertionError("no PredictTurn within 320 ms of silence")

    def silence_until(self, event: str, max_ms: int) -> tuple[Step, int]:
        """Silence in 32 ms appends until `event` is sent: that step and the silence spoken."""
        for spoken in range(32, max_ms + 32, 32):
            step = self.speak(32, 0.0)
            if event in types(step):
                return step, spoken
        raise AssertionError(f"no {event} within {max_ms} ms")


def test_semantic_vad_needs_a_turn_model() -> None:
    """Without a `turn` model the update is refused whole and the session stays as it was."""
    s = Session(SemanticVad(), turn_model=False)
    [error] = of(s.last, se.ErrorEvent)
    assert error.error.code == "unsupported_turn_detection"
    assert isinstance(s.core.settings.turn_detection, ServerVad)


def test_semantic_vad_asks_the_model_at_the_candidate_pause_on_the_turn_so_far() -> None:
    s = Session(SemanticVad(eagerness="medium"))
    s.speak(640, 1.0)
    ask = s.pause()
    # The last 8 s of the turn at 16 kHz as buffered when asked: the speech and the pause.
    heard_ms = ask.audio16k.shape[0] / 16
    # 640 ms of speech, then the candidate pause (160 ms): all of it that is buffered.
    assert 640 + 160 - 32 <= heard_ms <= s.now
    assert "input_audio_buffer.speech_stopped" not in types(s.last)


def test_semantic_vad_commits_when_the_model_says_complete() -> None:
    """At or above the eagerness threshold (medium 0.85), once the silence has reached the
    sure wait: speech_stopped, committed and the response, in v1's order, at once; the turn's
    end is noted with cause `model`."""
    s = Session(SemanticVad(eagerness="medium"))
    s.speak(640, 1.0)
    ask = s.pause()
    s.speak(480, 0.0)  # the answer comes late: the silence is past the 600 ms sure wait
    out = s.handle(TurnPrediction(ask.token, 0.9))
    assert types(out)[:3] == [
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
    ]
    assert "response.created" in types(out)
    assert TurnEnded("model") in out.notes
    [stopped] = of(out, se.InputAudioBufferSpeechStopped)
    # The point of decision: the last chunk the VAD judged (it trails the client's clock).
    assert 640 + 600 <= stopped.audio_end_ms <= s.now


def test_semantic_vad_waits_below_the_threshold_and_speech_resumes_the_turn() -> None:
    s = Session(SemanticVad(eagerness="high"))
    s.speak(640, 1.0)
    ask = s.pause()
    assert not types(s.handle(TurnPrediction(ask.token, 0.8)))  # high's threshold is 0.85
    # The user goes on: still the same turn (no new speech_started), a new pause is asked.
    assert "input_audio_buffer.speech_started" not in types(s.speak(320, 1.0))
    again = s.pause()
    assert again.token != ask.token
    # A late answer about the first pause decides nothing.
    assert not types(s.handle(TurnPrediction(ask.token, 0.99)))
    s.speak(480, 0.0)  # past high's sure wait (500 ms)
    assert "input_audio_buffer.committed" in types(s.handle(TurnPrediction(again.token, 0.9)))


def test_an_unsure_pause_ends_the_turn_at_the_unsure_wait() -> None:
    """end_of_turn rule 3: the sound says not yet: high's unsure wait (1.2 s of silence)
    ends the turn, cause `unsure`."""
    s = Session(SemanticVad(eagerness="high"))
    s.speak(640, 1.0)
    ask = s.pause()
    s.handle(TurnPrediction(ask.token, 0.01))
    out, spoken = s.silence_until("input_audio_buffer.committed", 1600)
    assert 1200 - 320 <= spoken <= 1200  # counted from the end of speech, not the pause
    assert TurnEnded("unsure") in out.notes


def test_words_that_go_on_wait_for_the_unsure_wait_whatever_the_sound_says() -> None:
    """end_of_turn rule 3: "a table for" keeps the turn open past the sure wait, up to the
    unsure wait, though the sound says complete."""
    s = Session(SemanticVad(eagerness="high"), transcriber=True)
    s.speak(640, 1.0)
    ask = s.pause()
    [words] = [t for t in of(s.last, Transcribe) if t.purpose == "end_of_turn"]
    s.handle(TurnPrediction(ask.token, 0.99))
    ready = TranscriptReady("", "I'd like a table for", None, 0.8, "end_of_turn", words.token)
    assert not types(s.handle(ready))
    out, spoken = s.silence_until("input_audio_buffer.committed", 1600)
    assert 1200 - 320 <= spoken <= 1200
    assert TurnEnded("unsure") in out.notes


def test_a_sure_pause_is_committed_at_the_sure_wait() -> None:
    """end_of_turn rule 3: a sure answer at the candidate pause waits for medium's sure wait
    (600 ms of silence), then the turn ends with cause `model`."""
    s = Session(SemanticVad(eagerness="medium"))
    s.speak(640, 1.0)
    ask = s.pause()
    assert "input_audio_buffer.committed" not in types(s.handle(TurnPrediction(ask.token, 0.95)))
    out, spoken = s.silence_until("input_audio_buffer.committed", 1000)
    assert 600 - 320 <= spoken <= 600
    assert TurnEnded("model") in out.notes


def test_answers_not_back_by_the_unsure_wait_end_the_turn_as_late() -> None:
    """end_of_turn rule 2: a decision always arrives: the model never answers, and the turn
    ends at the unsure wait (medium: 2 s), cause `late`."""
    s = Session(SemanticVad(eagerness="medium"))
    s.speak(640, 1.0)
    s.pause()
    out, spoken = s.silence_until("input_audio_buffer.committed", 2400)
    assert 2000 - 320 <= spoken <= 2000
    assert TurnEnded("late") in out.notes


def test_turn_model_outage_falls_back_to_the_silence_rule_with_one_error() -> None:
    s = Session(SemanticVad(eagerness="low"))
    s.speak(640, 1.0)
    ask = s.pause()
    out = s.handle(TurnPrediction(ask.token, None, "turn model unreachable"))
    [error] = of(out, se.ErrorEvent)
    assert error.error.code == "turn_model_unavailable"
    assert "turn model unreachable" in error.error.message
    assert "input_audio_buffer.committed" not in types(out)
    # 500 ms of silence ends the turn (not low's 8 s), cause `fallback`.
    out, spoken = s.silence_until("input_audio_buffer.committed", 640)
    assert spoken <= 500 - 160
    assert TurnEnded("fallback") in out.notes
    # The next failure of the same outage is not told again.
    s.speak(640, 1.0)
    ask = s.pause()
    assert not of(s.handle(TurnPrediction(ask.token, None, "still down")), se.ErrorEvent)


def test_an_outage_answer_after_half_a_second_of_silence_ends_the_turn_at_once() -> None:
    s = Session(SemanticVad(eagerness="low"))
    s.speak(640, 1.0)
    ask = s.pause()
    s.speak(480, 0.0)  # the model hangs: 640 ms of silence by its failure
    out = s.handle(TurnPrediction(ask.token, None, "deadline exceeded"))
    assert "input_audio_buffer.committed" in types(out)


def test_a_good_answer_ends_the_outage() -> None:
    s = Session(SemanticVad(eagerness="low"))
    s.speak(640, 1.0)
    ask = s.pause()
    s.handle(TurnPrediction(ask.token, None, "down"))
    s.silence_until("input_audio_buffer.committed", 640)
    s.speak(640, 1.0)
    ask = s.pause()
    s.handle(TurnPrediction(ask.token, 0.1))  # back, and incomplete: low waits 8 s
    assert "input_audio_buffer.committed" not in types(s.speak(1024, 0.0))


def test_server_vad_turns_end_by_silence_and_ask_no_model() -> None:
    s = Session(ServerVad())
    s.speak(640, 1.0)
    out, _ = s.silence_until("input_audio_buffer.committed", 640)
    assert not of(out, PredictTurn)
    assert TurnEnded("silence") in out.notes


def test_switching_back_to_server_vad_ignores_late_answers() -> None:
    s = Session(SemanticVad())
    s.speak(640, 1.0)
    ask = s.pause()
    s.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=ServerVad())))
    assert not types(s.handle(TurnPrediction(ask.token, 0.99)))


def test_with_a_transcriber_the_pause_is_heard_too_and_words_that_go_on_keep_the_turn() -> None:
    """The pause's words (asr's fast decode, never shown to the client) decide with the
    model: "a table for" keeps the turn open though the model says complete."""
    s = Session(SemanticVad(eagerness="medium"), transcriber=True)
    s.speak(640, 1.0)
    ask = s.pause()
    [words] = [t for t in of(s.last, Transcribe) if t.purpose == "end_of_turn"]
    assert words.token == ask.token
    assert not types(s.handle(TurnPrediction(ask.token, 0.95)))  # waits for the words
    heard = TranscriptReady(
        words.item_id, "Book a table for", None, 0.3, "end_of_turn", words.token
    )
    assert not types(s.handle(heard))
    # The user goes on and stops: this time the words end.
    s.speak(320, 1.0)
    ask = s.pause()
    [words] = [t for t in of(s.last, Transcribe) if t.purpose == "end_of_turn"]
    done = TranscriptReady(
        words.item_id, "Book a table for four.", None, 0.3, "end_of_turn", words.token
    )
    s.handle(done)
    s.speak(480, 0.0)  # past medium's sure wait (600 ms)
    out = s.handle(TurnPrediction(ask.token, 0.95))
    assert "input_audio_buffer.committed" in types(out)
    assert "conversation.item.input_audio_transcription.completed" not in types(out)


def test_the_pause_s_words_are_the_turn_s_last_three_seconds() -> None:
    """turn_words rule 3: the fast decode's token budget would run out inside a long turn, so
    the words judged are its last 3 s; Smart Turn still hears up to 8 s."""
    s = Session(SemanticVad(eagerness="medium"), transcriber=True)
    s.speak(5120, 1.0)
    ask = s.pause()
    [words] = [t for t in of(s.last, Transcribe) if t.purpose == "end_of_turn"]
    assert words.audio16k.shape[0] == 3000 * 16
    assert ask.audio16k.shape[0] > 5000 * 16
