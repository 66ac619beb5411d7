"""The session core, sans-IO: where a realtime session decides, and nothing else happens.

Like h11's `Connection`: typed inputs in (a client event, or one of `inputs`, each with the
caller's clock), a `Step` of server events and typed actions out. No I/O, no clock, no Trio
(tests/test_architecture.py, rule 1); the Trio service (`orchestrator.service.sessions`)
carries the actions out.

- `core`: `SessionCore`; `core_types`: its `CoreConfig`, `CoreInput` and `Step`. It owns its
  parts as h11's `Connection` owns its state, each an object with its own state that answers
  what it decided: `core_turns` (`Turns`: turn taking), `core_history` (`History`: items,
  what was heard, transcripts), `core_tools` (`Tools`: function calling), `core_responses`
  (`Responses`: the live responses and their charts, the fence, requests); what they all need
  is owned once in `core_outbox` (`Outbox`: the step's output; `Ids`: item ids and timer
  tokens); `core_live`: a live response's record.
- `inputs`: what the core takes besides client events (VAD, backend output, transcripts,
  turn predictions, timer expiries, a close request).
- `actions`: what it asks its I/O layer to do (`StartBackend`, `CancelBackend`,
  `DetectSpeech`, `Transcribe`, `PredictTurn`, `ArmTimer`, `CancelTimer`, `SessionEnd`);
  `ending`: the one place a session's end gets its close code and reason.
- `decoding`: which appends the service may decode on a fast path (its decode policy).
- `envelope`: `Envelope`, server events as OpenAI sends them, built from the core's values.
- `audio`: G.711 and pcm16 codecs, streaming resampling, durations; `input_buffer`: the
  input audio buffer and the input clock; `transcript_wait`: the cascade's wait for the
  transcripts of a response's turns.
- `turns/`: turn taking's rules (server VAD, semantic end of turn, pause mode's overlaps,
  preemptive responses, the user's input side).
- `history/`: what the model hears (the conversation and its pruning, the playback ledger,
  the playout estimate, response fencing, rule 5's alignment of text to heard audio).
- `resume/`: session resume (the link to the client, the journal replayed from, and the
  link's own events: `session.created` with its token, `session.resumed`).

The package re-exports nothing: each name is imported from the module that defines it.
"""
