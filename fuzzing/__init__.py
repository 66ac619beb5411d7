"""The protocol fuzzer: generated client messages, the invariants every answer must satisfy,
and two ways to run them.

- `inputs`: what is sent (`FuzzInput`, one `Script` per session) and the placeholders.
- Strategies: `values` (the pieces), `valid`, `mutations`, `raw_frames`, `sequences`, and
  `scripts` that puts them together into sessions.
- `checks`: the invariants over a session's server events and each message's answer.
- Runners: `in_memory` feeds scripts to a `SessionCore` (with `stand_ins` for its I/O) and runs
  most of the fuzzing; `live` sends them over real sockets to a live server, whose health
  `server_health` watches. `campaign` draws scripts and has a runner judge each; `results`
  holds what a run found.

Shared by `tests/orchestrator/session/test_core_fuzz.py` and `tests/e2e/test_fuzz_e2e.py` (CI)
and `bench/fuzz.py` (`make fuzz`, the long run). The package re-exports nothing.
"""
