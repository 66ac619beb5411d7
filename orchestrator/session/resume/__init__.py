"""Session resume, pure: a session outlives its connection (docs/protocol.md, "Session resume").

- `link`: `SessionLink`, a session's link to its client: the event sequence, the resume
  token and what a resume may do.
- `journal`: `EventJournal`, the bounded journal of recent server events replayed from.
"""
