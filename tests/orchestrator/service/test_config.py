"""ServiceConfig sources: defaults < TOML file < TURNTAKER_* env < flags."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.service.config import ServiceConfig, load_config


def test_defaults_listen_on_loopback_with_the_cascade() -> None:
    config = load_config(env={})
    assert config == replace(ServiceConfig(), instance_id=config.instance_id)
    assert config.instance_id != ServiceConfig().instance_id, "instance ids must not repeat"
    assert config.host == "127.0.0.1" and config.pipeline == "cascade" and config.local_triton


def test_file_then_env_then_flags_win_in_that_order(tmp_path: Path) -> None:
    file = tmp_path / "turntaker.toml"
    file.write_text('port = 9000\npipeline = "qwen3_omni"\ntriton_urls = ["a:1", "b:2"]\n')
    env = {"TURNTAKER_PORT": "9100", "TURNTAKER_OMNI_WEIGHTS": "/w"}
    config = load_config(file=file, env=env, overrides={"port": 9200, "host": None})
    assert config.port == 9200
    assert config.pipeline == "qwen3_omni"
    assert config.triton_urls == ("a:1", "b:2") and not config.local_triton
    assert config.omni_weights == Path("/w")
    assert config.host == "127.0.0.1"


def test_env_lists_are_comma_separated() -> None:
    config = load_config(env={"TURNTAKER_TRITON_URLS": "h1:8001, h2:8001"})
    assert config.triton_urls == ("h1:8001", "h2:8001")


def test_unknown_file_setting_is_a_clear_error(tmp_path: Path) -> None:
    file = tmp_path / "bad.toml"
    file.write_text("prot = 1\n")
    with pytest.raises(ValueError, match=r"unknown settings \['prot'\]"):
        load_config(file=file, env={})


def test_unknown_pipeline_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown pipeline"):
        load_config(env={"TURNTAKER_PIPELINE": "gpt"})


def test_deadlines_come_from_the_environment_as_seconds() -> None:
    config = load_config(
        env={"TURNTAKER_DRAIN_TIMEOUT_S": "2.5", "TURNTAKER_SLOW_CLIENT_TIMEOUT_S": "3"}
    )
    assert config.drain_timeout_s == 2.5 and config.slow_client_timeout_s == 3.0
    defaults = ServiceConfig()
    assert defaults.max_session_s == 3600 and defaults.slow_client_timeout_s == 10
    assert defaults.drain_timeout_s == 15 and defaults.drain_answer_bound_s == 10


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_deadline_must_be_positive(value: str) -> None:
    with pytest.raises(ValueError, match="chunk_timeout_s must be > 0"):
        load_config(env={"TURNTAKER_CHUNK_TIMEOUT_S": value})


@pytest.mark.parametrize(("raw", "batching"), [("0", False), ("off", False), ("1", True)])
def test_omni_batching_and_its_bounds_come_from_the_env(raw: str, batching: bool) -> None:
    env = {"TURNTAKER_OMNI_BATCHING": raw, "TURNTAKER_OMNI_MAX_STREAMS": "12"}
    config = load_config(env=env)
    assert config.omni_batching is batching
    assert config.omni_max_streams == 12
    assert load_config(env={}).omni_batching is True
