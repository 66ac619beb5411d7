"""The page at `/` in a real headless Chromium against the real server."""
