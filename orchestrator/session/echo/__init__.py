"""Echo cancellation and noise reduction of the user's audio (core_echo.py runs them):
`far_end` places the session's own output on the input timeline (the echo's reference),
`processors` says what the core asks of the DSP, `webrtc` and `canceller` are WebRTC's (AEC3
and its noise suppressor, through pywebrtc-audio)."""
