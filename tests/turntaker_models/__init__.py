"""The models' code (turntaker_models/) without a Triton server."""
