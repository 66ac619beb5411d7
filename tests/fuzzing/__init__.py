"""Tests of the protocol fuzzer itself (fuzzing/): its checks, scripts, stand-ins and runner."""
