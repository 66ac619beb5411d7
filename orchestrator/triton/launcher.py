"""Start, watch and stop the `tritonserver` binary shipped in the nvidia-pytriton wheel.

PyPI has no installable Triton server; the wheel's bundled binary (Triton 2.51) is the route on
CPU machines. Its Python backend has to be laid out in a backend directory of our own because the
wheel keeps the stubs for every Python version apart, and the copies lose the wheel's RPATH, so
the library path is set here. See shared/TRITON_NOTES.md for the checked facts behind each step.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.cascade.voices import DEFAULT_VOICE, check_voice
from turntaker_models.settings import ModelSettings, check_null_speed, default_cache_dir

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "triton_python_backend_shm_region_"
# Process names as the kernel truncates them (15 characters) in /proc/PID/comm.
_TRITON_COMMS = frozenset({"tritonserver", "triton_python_b"})
_PR_SET_PDEATHSIG = 1


class TritonStartError(RuntimeError):
    """The server did not come up, or a model in the repository did not load."""


@dataclass(frozen=True)
class TritonConfig:
    """Everything one server run needs; passed down whole, never kept in module state."""

    model_repository: Path
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    host: str = "127.0.0.1"
    startup_timeout_s: float = 120.0
    # SIGTERM with open gRPC connections can hang far past --exit-timeout-secs: SIGKILL after this.
    stop_timeout_s: float = 15.0
    # None: the server's output goes to our stdout/stderr.
    log_file: Path | None = None
    log_verbose: int = 0
    # Where the backend directory is written once per wheel and Python version.
    cache_dir: Path = field(default_factory=default_cache_dir)
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    # Models to load (explicit model control; an ensemble brings its steps). Empty: every model.
    models: tuple[str, ...] = ()
    # The cancel board the pipeline stages check; None: a fresh file for this run in /dev/shm.
    board_path: Path | None = None
    # Qwen3-Omni weights for thinker/talker/code2wav; None: the models build tiny ones in cache.
    omni_weights: Path | None = None
    # Torch/onnxruntime threads per model process.
    model_threads: int = 1
    # Divides every delay of the benchmark model `null` (TURNTAKER_NULL_SPEED); must be > 0.
    null_speed: float = 1.0
    # A 24 kHz mono WAV that `null` answers with instead of its tone (TURNTAKER_NULL_AUDIO),
    # played once per response or looped (TURNTAKER_NULL_AUDIO_LOOP); None: the tone.
    null_audio: Path | None = None
    null_audio_loop: bool = False
    # The thinker's prompt journal (TURNTAKER_PROMPT_LOG): one JSON line per accepted request;
    # None: no journal.
    prompt_log: Path | None = None
    # Qwen3-Omni's stages batch their streams (TURNTAKER_OMNI_BATCHING); False: one stream at
    # a time per forward, kept to measure against. Streams each omni stage serves at once.
    omni_batching: bool = True
    omni_max_streams: int = 32
    omni_max_positions: int = 4096
    # The cascade `tts` stage's default voice (TURNTAKER_TTS_VOICE; ModelSettings.tts_voice).
    tts_voice: str = DEFAULT_VOICE

    def __post_init__(self) -> None:
        check_voice(self.tts_voice)
        # Refused here, before a server starts, rather than as a `null` model that fails to load.
        check_null_speed(self.null_speed)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"


@dataclass(frozen=True)
class _WheelLayout:
    server_bin: Path
    python_backend: Path
    stub: Path
    libs: Path


def _find_wheel() -> _WheelLayout:
    # find_spec does not import pytriton: importing it would pull its client stack for nothing.
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonStartError("nvidia-pytriton is not installed (pip install nvidia-pytriton)")
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    layout = _WheelLayout(
        server_bin=root / "bin" / "tritonserver",
        python_backend=root / "backends" / "python",
        stub=root / "python_backend_stubs" / version / "triton_python_backend_stub",
        libs=root.parent.parent / "nvidia_pytriton.libs",
    )
    for path in (layout.server_bin, layout.python_backend, layout.stub, layout.libs):
        if not path.exists():
            raise TritonStartError(f"nvidia-pytriton wheel lacks {path} (Python {version})")
    return layout


def write_backend_directory(cache_dir: Path) -> Path:
    """A backend directory with `python/` holding the Python backend and this Python's stub.

    Kept in a cache keyed by wheel and Python version, not a temporary folder, so that a
    launcher killed outright leaves nothing new behind; built aside and renamed into place so
    that launchers starting together never see it half written.
    """
    layout = _find_wheel()
    version = importlib.metadata.version("nvidia-pytriton")
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = cache_dir / f"triton-backends-{version}-py{py}"
    if (target / "python" / "triton_python_backend_stub").exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_dir))
    try:
        python_dir = building / "python"
        python_dir.mkdir()
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(layout.python_backend / name, python_dir / name)
        shutil.copy2(layout.stub, python_dir / "triton_python_backend_stub")
        try:
            building.rename(target)
        except OSError:
            # Another launcher won the race; its copy is just as good.
            if not (target / "python" / "triton_python_backend_stub").exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def server_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the server and its stubs need to find libpython and the venv's packages."""
    env = dict(os.environ if base is None else base)
    layout = _find_wheel()
    # This Python's own lib dir first, or the stub may load a system libpython of another patch.
    lib_dirs = [sysconfig.get_config_var("LIBDIR") or "", str(layout.libs)]
    if env.get("LD_LIBRARY_PATH"):
        lib_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(d for d in lib_dirs if d)
    # The stub ignores PYTHONPATH but resolves its packages from the first python on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: the server gets SIGTERM when its parent dies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


_STEP_MODEL = re.compile(r'model_name\s*:\s*"([^"]+)"')


def with_ensemble_steps(repository: Path, models: tuple[str, ...]) -> tuple[str, ...]:
    """`models` plus every model their ensembles call, recursively, in a stable order.

    In explicit model-control mode Triton 2.51 loads an ensemble without its steps (checked:
    the ensemble reports READY while its steps stay unloaded), so the launcher names them.
    """
    ordered: list[str] = []
    todo = list(models)
    while todo:
        name = todo.pop(0)
        if name in ordered:
            continue
        ordered.append(name)
        config = repository / name / "config.pbtxt"
        if config.exists():
            todo.extend(_STEP_MODEL.findall(config.read_text()))
    return tuple(ordered)


def triton_processes_running() -> bool:
    """Whether any tritonserver or Python backend stub process is alive on this machine."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in _TRITON_COMMS:
                return True
        except OSError:
            continue
    return False


def remove_stale_shm_regions() -> list[Path]:
    """Remove shared-memory regions that crashed servers left, only when no server runs."""
    if triton_processes_running():
        return []
    removed = []
    for path in SHM_DIR.glob(SHM_PREFIX + "*"):
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    # Shared-memory regions may only go once the killed stubs are really gone.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _http_json(url: str, method: str = "GET") -> tuple[int, object]:
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as error:
        return error.code, None


class TritonServer:
    """One tritonserver process on `config.model_repository`; a context manager."""

    def __init__(self, config: TritonConfig) -> None:
        self.config = config
        self.startup_s: float | None = None
        self.board_path = config.board_path or SHM_DIR / (
            f"turntaker-cancel-board-{config.grpc_port}-{os.getpid()}"
        )
        self._owns_board = config.board_path is None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._began = 0.0  # when `launch` started the process (time.monotonic)

    @property
    def http_url(self) -> str:
        return self.config.http_url

    @property
    def grpc_url(self) -> str:
        return self.config.grpc_url

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self, backend_dir: Path) -> list[str]:
        c = self.config
        return [
            str(_find_wheel().server_bin),
            f"--model-repository={c.model_repository.resolve()}",
            f"--backend-directory={backend_dir}",
            f"--http-address={c.host}",
            f"--http-port={c.http_port}",
            f"--grpc-address={c.host}",
            f"--grpc-port={c.grpc_port}",
            f"--metrics-address={c.host}",
            f"--metrics-port={c.metrics_port}",
            "--allow-gpu-metrics=false",
            f"--log-verbose={c.log_verbose}",
            *(["--model-control-mode=explicit"] if c.models else []),
            *(f"--load-model={name}" for name in with_ensemble_steps(c.model_repository, c.models)),
            *c.extra_args,
        ]

    def model_settings(self) -> ModelSettings:
        return ModelSettings(
            board_path=self.board_path,
            cache_dir=self.config.cache_dir,
            omni_weights=self.config.omni_weights,
            threads=self.config.model_threads,
            null_speed=self.config.null_speed,
            null_audio=self.config.null_audio,
            null_audio_loop=self.config.null_audio_loop,
            prompt_log=self.config.prompt_log,
            omni_batching=self.config.omni_batching,
            omni_max_streams=self.config.omni_max_streams,
            omni_max_positions=self.config.omni_max_positions,
            tts_voice=self.config.tts_voice,
        )

    def board(self) -> CancelBoard:
        """The cancel board this server's models check (the caller closes it)."""
        return CancelBoard.open(self.board_path)

    def start(self) -> float:
        """Start the server and wait until it and every model are ready; returns seconds taken.

        Call it from a thread that lives as long as the server should: the kernel's parent-death
        signal fires when the thread that started the child exits, not the whole process, so a
        short-lived worker thread (trio.to_thread's cache, say) would take the server down.
        """
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """`start`'s first half: the server's process, not yet ready. Several servers launched
        one after the other load their models at the same time; `wait_ready` on each then."""
        if self._process is not None:
            raise RuntimeError("server already started")
        if not self.config.model_repository.is_dir():
            raise TritonStartError(f"no model repository at {self.config.model_repository}")
        remove_stale_shm_regions()
        self._began = time.monotonic()
        backend_dir = write_backend_directory(self.config.cache_dir)
        # Created before the stubs start so that every stage maps the same zeroed file.
        CancelBoard.open(self.board_path).close()
        env = server_environment()
        env.update(self.model_settings().environment())
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("OMP_NUM_THREADS", str(self.config.model_threads))
        output: IO[bytes] | None = None
        if self.config.log_file is not None:
            self.config.log_file.parent.mkdir(parents=True, exist_ok=True)
            self._log = output = self.config.log_file.open("wb")
        self._process = subprocess.Popen(
            self.command(backend_dir),
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            stdin=subprocess.DEVNULL,
            # Own process group: Ctrl-C reaches only us, and SIGKILL can take the stubs too.
            process_group=0,
            preexec_fn=_die_with_parent,
        )

    def wait_ready(self) -> float:
        """`start`'s second half: wait until the launched server and every model are ready
        (stopping it if they never are); returns seconds since `launch`."""
        try:
            self._wait_ready(self._began)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - self._began
        return self.startup_s

    def _wait_ready(self, began: float) -> None:
        assert self._process is not None
        deadline = began + self.config.startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                raise TritonStartError(f"tritonserver exited with {code} {self._log_hint()}")
            try:
                status, _ = _http_json(f"{self.http_url}/v2/health/ready")
            except OSError:
                status = 0
            if status == 200:
                break
            if time.monotonic() > deadline:
                raise TritonStartError(
                    f"tritonserver not ready after {self.config.startup_timeout_s:.0f} s "
                    f"{self._log_hint()}"
                )
            time.sleep(0.1)
        index = self.models()
        # In explicit mode the index also lists the models left unloaded (state None).
        names = {str(m.get("name")) for m in index}
        # Explicit mode: what was asked for plus whatever it pulled in (an ensemble's steps).
        asked = self.config.models
        wanted = set(with_ensemble_steps(self.config.model_repository, asked)) if asked else names
        not_ready = [
            f"{m.get('name')}: {m.get('state')} {m.get('reason', '')}".strip()
            for m in index
            if m.get("name") in wanted and m.get("state") != "READY"
        ]
        not_ready += [f"{n}: not in the repository" for n in sorted(wanted - names)]
        if not_ready:
            raise TritonStartError(f"models not ready: {'; '.join(not_ready)} {self._log_hint()}")

    def models(self) -> list[dict[str, str]]:
        """The repository index: one dict per model with name, version and state."""
        status, body = _http_json(f"{self.http_url}/v2/repository/index", method="POST")
        if status != 200 or not isinstance(body, list):
            raise TritonStartError(f"repository index failed with HTTP {status}")
        return [dict(m) for m in body if isinstance(m, dict)]

    def _log_hint(self) -> str:
        if self.config.log_file is None:
            return "(see the server output above)"
        try:
            tail = self.config.log_file.read_text(errors="replace")[-2000:]
        except OSError:
            tail = ""
        return f"(log {self.config.log_file}):\n{tail}"

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL to the whole group after the timeout; returns the exit code."""
        process, self._process = self._process, None
        code: int | None = None
        if process is not None:
            code = process.poll()
            if code is None:
                process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(timeout=self.config.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    code = None
            # The stubs outlive a killed server for seconds; kill the group they share with it.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if code is None:
                code = process.wait()
            _wait_group_gone(process.pid, timeout_s=5.0)
        if self._log is not None:
            self._log.close()
            self._log = None
        remove_stale_shm_regions()
        if self._owns_board:
            self.board_path.unlink(missing_ok=True)
        return code

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
