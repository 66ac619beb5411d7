"""The benchmarks (`make bench`, `make soak`, `make fuzz`), each run as `python -m bench.NAME`.

Results go to docs/benchmarks.md (`report`: one section per benchmark) and
docs/reliability.md. One harness: `cli` (every benchmark's `main`: its options, `--write`),
`servers` (Triton and the realtime server a benchmark measures), `stats` (medians, p90/p99,
ratios), `report` (its section in the document),
`realtime_wire` (what a benchmark's client sends), `speech` (the reference speech that tests
and benchmarks share). The rest are benchmarks and their corpora, clients and checkers:
end of turn, interruptions and overlaps, latency and load, pipelines, the omni stages, VAD
batching, the Trio bridge, tool decoding, protocol decoding, the soaks and the long fuzz run.
"""
