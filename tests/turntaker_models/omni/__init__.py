"""Qwen3-Omni's stages (turntaker_models/omni/) on tiny weights, without a Triton server."""
