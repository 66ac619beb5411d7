"""Session resume's link and journal (orchestrator/session/resume/)."""
