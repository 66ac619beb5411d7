"""What the model hears: the conversation, and how much of each reply the user heard.

- `conversation`: `Conversation`, the history's items and reply slots, and its pruning
  (docs/protocol.md rule 6, `conversation.context`).
- `playback`: `PlaybackLedger`, what of each reply the client played (rule 5).
- `playout`: `PlayoutClock`, the server's own estimate of it for clients that never say.
- `fencing`: `ResponseFence`: no output of a closed response gets through (rule 2).
"""
