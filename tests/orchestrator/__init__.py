"""Tests of the realtime server (orchestrator/), one package per source package."""
