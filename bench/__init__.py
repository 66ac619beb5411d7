"""The benchmarks (`make bench`, `make soak`, `make fuzz`), each run as `python -m bench.NAME`.

Results go to docs/benchmarks.md (`report`: one section per benchmark) and
docs/reliability.md. Shared parts: `serve_process` (the servers a benchmark measures),
`realtime_wire` (what a benchmark's client sends), `speech` (the reference speech that tests
and benchmarks share). The rest are benchmarks and their corpora, clients and checkers:
end of turn, interruptions and overlaps, latency and load, pipelines, the omni stages, VAD
batching, the Trio bridge, tool decoding, protocol decoding, the soaks and the long fuzz run.
"""
