"""The tests, mirroring the source tree; tests/test_architecture.py holds the import rules."""
