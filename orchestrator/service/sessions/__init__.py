"""A session's I/O: Trio tasks that feed a `SessionCore` and carry out its actions.

- `host`: `SessionHost`, this process's sessions, which outlive their connections.
- `connection`: `Connection`, a client connection's side of a session.
- `actor`: `SessionActor`, one task and mailbox per session, owning its core and link;
  `attachment`: its hold on a connection (sequencing, journal, outbox, loss, the grace
  timer, takeover); `backend_jobs`: the backend calls it starts (responses, transcriptions,
  turn predictions).
- `outbox`: `Outbox`, encoded server events on their way to the socket, bounded.
- `timers`: `Timers`, the timers the core arms; `vad_feeder`: `VadFeeder`, each append's
  chunks to the VAD.
- `services`: `SessionServices`, what an actor is given (VAD, transcriber, turn model,
  response services, metrics); `session_metrics`: one session's share of the metrics.
"""
