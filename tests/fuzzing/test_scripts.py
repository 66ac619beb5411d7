"""Scripts are what they say (fuzzing/scripts.py, fuzzing/inputs.py): exact length, a cap on
responses, the connection-ending frame only last, every placeholder filled in."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from fuzzing.inputs import FRESH, LAST_ITEM, SID, Known, Script, substitute
from fuzzing.scripts import live_scripts, memory_scripts, scripts

FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(scripts(12, max_responses=1))
def test_a_script_has_exactly_its_length_and_at_most_its_responses(script: Script) -> None:
    assert len(script.inputs) == 12
    assert sum(inp.starts_response for inp in script.inputs) <= 1
    assert script.inputs[0].kind == "setup:session.update"


@FAST
@given(live_scripts())
def test_a_non_utf8_text_frame_can_only_come_last(script: Script) -> None:
    assert not any(inp.text_bytes for inp in script.inputs[:-1])


@FAST
@given(live_scripts())
def test_live_scripts_keep_audio_below_what_whisper_would_transcribe(script: Script) -> None:
    assert not any(inp.kind.endswith(":long") for inp in script.inputs)


@FAST
@given(memory_scripts())
def test_memory_scripts_may_start_more_responses(script: Script) -> None:
    assert sum(inp.starts_response for inp in script.inputs) <= 4


def test_placeholders_are_filled_with_what_the_session_made() -> None:
    known = Known(session_id="sess_1", last_item="item_7")
    frame = f'{{"item_id": "{LAST_ITEM}", "previous": "item_{SID}_3", "id": "{FRESH}"}}'
    assert (
        substitute(frame, 4, known)
        == '{"item_id": "item_7", "previous": "item_sess_1_3", "id": "fz_4"}'
    )
    assert substitute(frame.encode(), 4, known) == substitute(frame, 4, known).encode()
