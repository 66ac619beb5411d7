"""Function definitions the tool-calling tests share, in the pipeline contract's form."""

from __future__ import annotations

from turntaker_models.contract import ToolSpec

WEATHER = ToolSpec(
    "get_weather",
    "The current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
# For the tiny random Qwen3-Omni weights, which never choose to close a string or an object:
# bounded and with no other keys, so that the grammar closes them.
BOUNDED_WEATHER = ToolSpec(
    "get_weather",
    WEATHER.description,
    {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 16}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
