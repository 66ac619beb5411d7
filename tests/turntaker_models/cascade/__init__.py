"""The cascade's models (turntaker_models/cascade/) without a Triton server."""
