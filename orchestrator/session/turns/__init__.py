"""Turn taking's pure rules: numbers and transcripts in, facts about the user's turn out.

- `detection`: `TurnDetector`, OpenAI's server-VAD segmentation (speech started and stopped,
  candidate pauses) over silero's speech probabilities.
- `end_of_turn`: `EndOfTurn`, semantic_vad's rules on the `turn` model's answers.
- `overlap`: `OverlapTracker`, pause mode's facts about speech over a reply.
- `preemption`: `Preemption`, a preemptive response and its held output before its turn is
  committed.
- `user_input`: `UserInput`, the input side: the input buffer, the turn detector, the idle
  timer.
"""
