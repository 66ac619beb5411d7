"""A session's Trio tasks (orchestrator/service/sessions/) in memory, no sockets."""
