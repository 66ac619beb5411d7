"""End to end: the realtime server over real WebSockets, with a real Triton behind it."""
