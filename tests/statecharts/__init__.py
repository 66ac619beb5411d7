"""The statecharts (statecharts/), each driven alone, and their committed diagrams."""
