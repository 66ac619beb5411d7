"""Deploying: `--workers` behind real nginx, resume through it, Dockerfile.triton."""
