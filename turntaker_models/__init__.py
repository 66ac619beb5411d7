"""Model-side code for the Triton Python-backend models in `model_repository/`.

Each model's `model.py` is a thin Triton adapter; the work (loading, stepping, cancelling) lives
here so it is typed, linted and testable without a server.
"""
