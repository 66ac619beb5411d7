"""The session store (orchestrator/service/store/), in memory and on a real redis-server."""
