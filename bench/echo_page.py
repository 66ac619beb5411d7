"""The page on a speakerphone: the bundled web page (orchestrator/service/static/), in headless
Chromium, hears its own playback through a room and sends its real ACKs (issue 34, deliverable
4). What bench/echo.py measures for a scripted client (bench/speakerphone.py), measured here
for the page itself.

The room is a test-only audio graph injected before the page loads (`ROOM_JS`, through
Playwright's `add_init_script`); no production file knows of it:
- `AudioContext` is wrapped to remember the page's context, and `AudioNode.prototype.connect`
  so that whatever the page connects to its context's `destination` (its loudspeaker: the
  playback worklet) is also connected into the room: a `DelayNode` (the room's `delay_ms`,
  the playout and capture latency), then a `ConvolverNode` holding the room's impulse response
  (bench/rooms.py: pyroomacoustics, unit energy times the echo level's gain, no
  normalisation). A node connected to the destination through a gain of 0 (the page's muted
  capture sink) is silent and left out.
- `navigator.mediaDevices.getUserMedia` is wrapped: it opens the real (fake) microphone,
  Chromium's `--use-file-for-fake-audio-capture` wav, and returns instead the stream of a
  `MediaStreamAudioDestinationNode` in the page's context that sums that microphone and the
  room's echo. The page builds its capture graph on it as on any microphone.
- Meters (an AudioWorklet of the script's own) note the user's speech onsets on the fake
  microphone alone, carried through a second `MediaStreamAudioDestinationNode` so that it
  reaches the meter as late as the mixed stream reaches the page's capture, and the echo's
  level. `window.__echoRoom` holds what they saw, the constraints the page asked for and any
  error of the graph.

Rules:
1. One session is one browser: its fake microphone plays the session's wav once, from the
   page's getUserMedia (Connect). The page's own form asks for the session (server VAD,
   silence 500 ms, interrupt on speech, immediate mode), with "Server echo cancellation"
   ticked or not; extra session fields go out in one more session.update. The question is
   typed (sent by the page's `send`, once the session is updated) or spoken by the wav.
2. The answer is the first `response.created` after that. It is cut when the page cut it off
   (its `clears` record: on `speech_started` at once in immediate mode, or on the server's
   `output_audio_buffer.cleared` / a cancelled `response.done`). The user's onset is the
   meter's first onset on the fake microphone after `response.created`: when the page's audio
   thread had the user's first sample (the page sends it within its 20 ms chunk). Times are
   the page's `performance.now()` (ms).
3. A false barge-in: the answer cut before the user's onset (or with no user at all); echo
   heard as speech: a `speech_started` between the answer's first audio and the onset. An
   interruption is missed when the answer was playing at the onset and not cut within
   `MISS_AFTER_S` (the take's `miss_after_s`). Onset -> interrupt is the onset to the page's
   cut (median / p90), and to the server's `output_audio_buffer.cleared` beside it.
4. The bench: a tritonserver whose `null` model answers with the cascade's voice (Piper `joe`,
   bench/echo_corpus.py's answer; no compute) beside `vad`, `asr`, `cancel`, `turn`, the
   realtime server in its own process, and one page session per item of bench/echo_corpus.py
   (voice `cascade`: echo alone and interruptions, rooms cycling rt60 and distance, a seed
   each) at each echo level with cancellation on, and a few echo-alone sessions with it off
   (the reference: the same echo is heard as speech and barges in). The page plays the
   answer with its own player (no scripted jitter); the wav holds the room's tone, and the
   user's speech `offset_s` after where the answer's first audio is expected (`LEAD_S` after
   the microphone opens); the offsets measured are reported.
5. Target (cancellation on): false barge-ins from echo alone <= 2% (`FALSE_TARGET`), with its
   95% interval; machine load recorded (bench/machine_load.py).
6. A false barge-in is traced to the chunk that started its speech: the realtime server is
   bench/load_server.py (the same `serve()`), whose echo verdicts (orchestrator/session/echo/
   verdict.py) are taken after each session; the first chunk heard at the page's threshold
   (`THRESHOLD`, its form's default) is the culprit, and the notes say what each echo rule
   measured of it and which let it through.

Run: `python -m bench.echo_page --write` (writes "## Echo: the page" in docs/benchmarks.md);
`--quick` runs three sessions (CI).
Here, not under tests/: bench/ must not import from tests/; tests/browser/test_echo_page.py
drives the page through the same `run_session`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright import sync_api

from bench import cli, machine_load, report, servers, stats
from bench.echo import notes
from bench.echo_corpus import EchoItem, Plan, answer, build
from bench.overlap_corpus import room_tone
from bench.rooms import SPEECH_RMS, Room
from bench.speech import RATE, Audio, pcm16

HEADING = "## Echo: the page"
MODELS = ("null", "vad", "asr", "cancel", "turn")
CHROMIUM = Path("/usr/lib/chromium/chromium")
# Headless Chromium with fake media devices and no background work. tests/browser/conftest.py
# launches its browsers with these too, so that the page is tested and measured in one browser.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
)
# This bench's sessions only (`launch`): the page's audio may start without a user gesture; the
# browser tests keep Chromium's own policy.
AUTOPLAY = "--autoplay-policy=no-user-gesture-required"
# The meters: a sample louder than this after HANG_S under it is an onset (the room's tone is
# at about -54 dBFS, speech at SPEECH_RMS).
ONSET_THRESHOLD = 0.02
HANG_S = 0.3
# A 128-frame quantum louder than this counts toward the echo's active level.
ACTIVE_RMS = 0.003
MISS_AFTER_S = 3.0
SETTLE_S = 0.5
POLL_S = 0.05
FALSE_TARGET = 0.02
CHUNK_S = 0.08  # the null pipeline's chunk
# From the microphone's opening (its wav's start) to the answer's first audio on `null` with a
# typed question: 0.30-0.35 s measured on a 2-core machine. The user's offset counts from here;
# the offsets measured are reported.
LEAD_S = 0.35
DELAY_MS = 120.0
THRESHOLD = 0.5  # rule 6: the page's form's default (static/index.html)
LEVELS_DB = (-10.0, 0.0)
QUESTION = "What is the weather like in Paris?"

# The test-only audio graph (module docstring). `__CONFIG__` is replaced by `init_script`.
ROOM_JS = r"""
(() => {
  const config = __CONFIG__;
  const connect = AudioNode.prototype.connect;
  const state = {
    config: {
      rate: config.rate, delay_s: config.delay_s, taps: config.taps ? config.taps.length : 0,
    },
    constraints: [], errors: [], rooms: 0, tapped: 0, mic: false, mic_at: null,
    user: { onsets: [] },
    echo: { onsets: [], active_sumsq: 0, active_n: 0, peak: 0 },
  };
  Object.defineProperty(window, "__echoRoom", { value: state });
  let lastContext = null;
  const rooms = new WeakMap();

  const Base = window.AudioContext;
  window.AudioContext = class extends Base {
    constructor(...args) {
      super(...args);
      lastContext = this;
    }
  };

  const METER = `
    class Meter extends AudioWorkletProcessor {
      constructor(options) {
        super();
        const o = options.processorOptions;
        this.threshold = o.threshold;
        this.hang = Math.round(o.hang_s * sampleRate);
        this.active = o.active;
        this.quiet = this.hang;
        this.sumsq = 0; this.n = 0; this.peak = 0; this.since = 0;
      }
      process(inputs, outputs) {
        const ch = inputs[0] && inputs[0][0];
        if (ch) {
          let q = 0;
          for (let i = 0; i < ch.length; i++) {
            const a = Math.abs(ch[i]);
            if (a > this.threshold) {
              if (this.quiet >= this.hang) {
                this.port.postMessage({ type: "onset", frame: currentFrame + i });
              }
              this.quiet = 0;
            } else {
              this.quiet++;
            }
            if (a > this.peak) this.peak = a;
            q += ch[i] * ch[i];
          }
          if (q / ch.length > this.active * this.active) { this.sumsq += q; this.n += ch.length; }
        } else {
          this.quiet += 128;
        }
        this.since += 128;
        if (this.since >= sampleRate / 4) {
          this.since = 0;
          this.port.postMessage({ type: "level", sumsq: this.sumsq, n: this.n, peak: this.peak });
        }
        for (const c of outputs[0] || []) c.fill(0);
        return true;
      }
    }
    registerProcessor("echo-room-meter", Meter);
  `;
  const meterUrl = URL.createObjectURL(new Blob([METER], { type: "application/javascript" }));

  function meter(ctx, record) {
    const node = new AudioWorkletNode(ctx, "echo-room-meter", {
      numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1],
      channelCount: 1, channelCountMode: "explicit",
      processorOptions: {
        threshold: config.threshold, hang_s: config.hang_s, active: config.active,
      },
    });
    node.port.onmessage = (e) => {
      const m = e.data;
      if (m.type === "onset") record.onsets.push({ frame: m.frame, t: performance.now() });
      else if (m.type === "level" && "active_sumsq" in record) {
        record.active_sumsq = m.sumsq; record.active_n = m.n; record.peak = m.peak;
      }
    };
    // Pulled through a silent sink, as the page's capture is.
    const sink = new GainNode(ctx, { gain: 0 });
    connect.call(node, sink);
    connect.call(sink, ctx.destination);
    return node;
  }

  function room(ctx) {
    let r = rooms.get(ctx);
    if (r) return r;
    const mono = { channelCount: 1, channelCountMode: "explicit" };
    r = {
      input: new GainNode(ctx, { gain: 1, ...mono }),
      mix: new MediaStreamAudioDestinationNode(ctx, mono),
      userOut: new MediaStreamAudioDestinationNode(ctx, mono),
      echo: null,
    };
    if (config.taps) {
      if (ctx.sampleRate !== config.rate) {
        state.errors.push(`the page's context runs at ${ctx.sampleRate} Hz, ` +
                          `the room's response at ${config.rate}`);
      } else {
        const delay = new DelayNode(ctx, {
          delayTime: config.delay_s, maxDelayTime: Math.max(1, config.delay_s + 0.1),
        });
        const conv = new ConvolverNode(ctx, { disableNormalization: true, ...mono });
        const buffer = new AudioBuffer({
          numberOfChannels: 1, length: config.taps.length, sampleRate: ctx.sampleRate,
        });
        buffer.copyToChannel(Float32Array.from(config.taps), 0);
        conv.buffer = buffer;
        connect.call(r.input, delay);
        connect.call(delay, conv);
        connect.call(conv, r.mix);
        r.echo = conv;
      }
    }
    rooms.set(ctx, r);
    state.rooms += 1;
    return r;
  }

  // The loudspeaker: whatever reaches the destination also goes into the room.
  AudioNode.prototype.connect = function (destination, ...rest) {
    const result = connect.call(this, destination, ...rest);
    if (destination instanceof AudioDestinationNode &&
        !(this instanceof GainNode && this.gain.value === 0)) {
      try {
        connect.call(this, room(this.context).input, rest.length ? rest[0] : 0);
        state.tapped += 1;
      } catch (error) {
        state.errors.push("tap: " + error);
      }
    }
    return result;
  };

  // The microphone: the fake device's stream plus the room's echo.
  const getUserMedia = MediaDevices.prototype.getUserMedia;
  MediaDevices.prototype.getUserMedia = async function (constraints) {
    state.constraints.push(JSON.parse(JSON.stringify(constraints ?? null)));
    const real = await getUserMedia.call(this, constraints);
    const ctx = lastContext;
    if (!constraints || !constraints.audio || !ctx) {
      state.errors.push("getUserMedia before any AudioContext: the microphone is left as it is");
      return real;
    }
    try {
      const r = room(ctx);
      await ctx.audioWorklet.addModule(meterUrl);
      const source = new MediaStreamAudioSourceNode(ctx, { mediaStream: real });
      connect.call(source, r.mix);
      connect.call(source, r.userOut);
      const userBack = new MediaStreamAudioSourceNode(ctx, { mediaStream: r.userOut.stream });
      connect.call(userBack, meter(ctx, state.user));
      if (r.echo) connect.call(r.echo, meter(ctx, state.echo));
      const mixed = r.mix.stream;
      // The page stops the stream it was given: the device's goes with it.
      for (const track of mixed.getTracks()) {
        const stop = track.stop.bind(track);
        track.stop = () => { stop(); real.getTracks().forEach((t) => t.stop()); };
      }
      state.mic = true;
      state.mic_at = performance.now();
      return mixed;
    } catch (error) {
      state.errors.push("microphone: " + error);
      return real;
    }
  };
})();
"""


def init_script(room: Room | None, rate: int = RATE) -> str:
    """`ROOM_JS` for `room` (None: no echo, only the meters and the wrapped microphone)."""
    taps: list[float] | None = None
    delay_s = 0.0
    if room is not None:
        response = room.impulse_response(rate)
        delay = round(room.delay_ms * rate / 1000)
        taps = [float(f"{x:.6g}") for x in response[delay:]]
        delay_s = delay / rate
    config = {
        "rate": rate,
        "delay_s": delay_s,
        "taps": taps,
        "threshold": ONSET_THRESHOLD,
        "hang_s": HANG_S,
        "active": ACTIVE_RMS,
    }
    return ROOM_JS.replace("__CONFIG__", json.dumps(config))


def launch(driver: sync_api.Playwright, wav: Path) -> sync_api.Browser:
    """Headless Chromium (Debian's build) whose microphone plays `wav` once."""
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: apt-get install chromium")
    return driver.chromium.launch(
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            *CHROMIUM_ARGS,
            AUTOPLAY,
            f"--use-file-for-fake-audio-capture={wav.resolve()}%noloop",
        ],
    )


def write_wav(path: Path, audio: Audio) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(pcm16(audio))
    return path


@dataclass(frozen=True)
class Take:
    """One page session (rule 1)."""

    mic: Audio  # what the fake microphone plays, once, from Connect
    room: Room | None
    cancellation: bool
    ask: str | None = None  # typed once the session is updated; None: the wav asks
    speaks: bool = False  # the wav holds the user's speech over the answer
    session: dict[str, Any] = field(default_factory=dict)  # more session.update fields
    timeout_s: float = 40.0
    miss_after_s: float = MISS_AFTER_S  # rule 3


@dataclass
class PageOutcome:
    """What the page saw in one session (rule 2; page ms). None: never seen."""

    answer_id: str | None = None
    created: float | None = None
    first_audio: float | None = None
    onset: float | None = None
    cut: float | None = None
    trigger: str | None = None
    cleared: float | None = None
    done_status: str | None = None
    finished: bool = False
    finished_at: float | None = None  # its last ACK, when heard in full
    speech_starts: list[float] = field(default_factory=list)
    played_ms: float = 0.0  # of the answer, by the worklet
    played_at_onset_ms: float | None = None
    progress_acks: int = 0  # playback.ack with input_ms, of the answer
    echo_rms: float = math.nan  # the echo's active level in the page's room (full scale 1)
    mic_at: float | None = None  # the fake microphone opened (its wav starts about then)
    constraints: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    log: str = ""  # the page's event log (without deltas), for a failure's message
    browser: str = ""  # Chromium's version
    wall_s: float = 0.0

    @property
    def cut_by_echo(self) -> bool:
        return self.cut is not None and (self.onset is None or self.cut < self.onset)

    @property
    def echo_speech(self) -> bool:
        start = self.first_audio if self.first_audio is not None else math.inf
        end = self.onset if self.onset is not None else math.inf
        return any(start <= t < end for t in self.speech_starts)

    @property
    def playing_at_onset(self) -> bool:
        """The user spoke over the answer: it had begun to play and was neither cut nor over."""
        return (
            self.onset is not None
            and self.first_audio is not None
            and self.first_audio < self.onset
            and not self.cut_by_echo
            and not (self.finished_at is not None and self.finished_at <= self.onset)
        )

    @property
    def interrupted(self) -> bool:
        return self.cut is not None and self.onset is not None and self.cut >= self.onset

    @property
    def latency_s(self) -> float:
        if self.interrupted and self.cut is not None and self.onset is not None:
            return (self.cut - self.onset) / 1000
        return math.nan

    @property
    def cleared_latency_s(self) -> float:
        if self.interrupted and self.cleared is not None and self.onset is not None:
            return (self.cleared - self.onset) / 1000
        return math.nan

    @property
    def offset_s(self) -> float:
        """The user's onset after the answer's first audio."""
        if self.onset is None or self.first_audio is None:
            return math.nan
        return (self.onset - self.first_audio) / 1000

    @property
    def lead_s(self) -> float:
        """From the microphone's opening to the answer's first audio."""
        if self.mic_at is None or self.first_audio is None:
            return math.nan
        return (self.first_audio - self.mic_at) / 1000

    @property
    def echo_db(self) -> float:
        """The echo's active level against the user's speech level (bench/rooms.py rule 3)."""
        if not self.echo_rms > 0:
            return math.nan
        return float(20 * math.log10(self.echo_rms / SPEECH_RMS))


# One look at the page: the answer and what happened to it (rule 2).
SNAPSHOT_JS = r"""
() => {
  const tt = window.turntaker, room = window.__echoRoom;
  const of = (type) => tt.events.filter((e) => e.dir === "<" && e.type === type);
  const created = of("response.created")[0];
  const rid = created ? created.response_id : null;
  const out = { now: performance.now(), state: tt.state, rid, created: created ? created.t : null };
  if (!rid) return out;
  const first = tt.statsLog.find((s) => s.rid === rid && s.played > 0);
  const done = of("response.done").find((e) => e.response_id === rid);
  const cleared = of("output_audio_buffer.cleared").find((e) => e.response_id === rid);
  const onset = room.user.onsets.find((o) => o.t > created.t);
  let playedAtOnset = null;
  if (onset) {
    const before = tt.statsLog.filter((s) => s.rid === rid && s.t <= onset.t);
    playedAtOnset = before.length ? before[before.length - 1].played * 1000 / 24000 : 0;
  }
  Object.assign(out, {
    first_audio: first ? first.t : null,
    clear: tt.clears[rid] || null,
    cleared: cleared ? cleared.t : null,
    done: done ? done.status : null,
    finished: tt.playbackState === "finished" && !!done && done.status === "completed",
    acks_t: tt.acks.filter((a) => a.response_id === rid).map((a) => a.t),
    onset: onset ? onset.t : null,
    played_at_onset: playedAtOnset,
    played_ms: tt.playedBy[rid] || 0,
    speech_starts: of("input_audio_buffer.speech_started").filter((e) => e.t > created.t)
      .map((e) => e.t),
    progress_acks: tt.acks.filter((a) => a.response_id === rid && a.input_ms !== undefined)
      .length,
  });
  return out;
}
"""

# Once the page's session is updated: the extra session fields, then the typed question.
START_JS = r"""
async ({ extra, ask }) => {
  const tt = window.turntaker;
  const updated = () => tt.events.filter((e) => e.dir === "<" && e.type === "session.updated")
    .length;
  const until = (test, ms, what) => new Promise((ok, fail) => {
    const t0 = performance.now();
    const id = setInterval(() => {
      if (test()) { clearInterval(id); ok(); }
      else if (performance.now() - t0 > ms) { clearInterval(id); fail(new Error(what)); }
    }, 5);
  });
  await until(() => updated() >= 1, 20000, "no session.updated for the page's session.update");
  if (extra) {
    tt.send({ type: "session.update", session: { type: "realtime", ...extra } });
    await until(() => updated() >= 2, 10000, "no session.updated for the extra fields");
  }
  if (ask) {
    tt.send({ type: "conversation.item.create", item: { type: "message", role: "user",
      content: [{ type: "input_text", text: ask }] } });
    tt.send({ type: "response.create" });
  }
  return document.getElementById("echo").checked;
}
"""


def run_session(
    driver: sync_api.Playwright, http_url: str, take: Take, folder: Path
) -> PageOutcome:
    """One page session (rules 1-3); failures are kept on the outcome, not raised."""
    out = PageOutcome()
    began = time.monotonic()
    handle, name = tempfile.mkstemp(suffix=".wav", dir=folder)
    os.close(handle)
    wav = write_wav(Path(name), take.mic)
    browser = launch(driver, wav)
    out.browser = browser.version
    page: sync_api.Page | None = None
    try:
        page = browser.new_page()
        page.add_init_script(script=init_script(take.room))
        page.goto(http_url.rstrip("/") + "/")
        page.set_checked("#echo", take.cancellation)
        page.click("#connect")
        held = page.evaluate(START_JS, {"extra": take.session or None, "ask": take.ask})
        if bool(held) != take.cancellation:
            raise RuntimeError(f"echo cancellation not held by the server: {held}")
        _follow(page, take, out)
    except (sync_api.Error, RuntimeError) as error:
        out.errors.append(f"session failed: {error}")
    finally:
        try:
            if page is not None:
                _read(page, out)
        except sync_api.Error as error:
            out.errors.append(f"page not read: {error}")
        browser.close()
        wav.unlink(missing_ok=True)
    out.wall_s = time.monotonic() - began
    return out


def _follow(page: sync_api.Page, take: Take, out: PageOutcome) -> None:
    """Until the answer was cut (and settled), heard to its end, or the user's speech was
    missed (rule 3)."""
    deadline = time.monotonic() + take.timeout_s
    while True:
        snap = page.evaluate(SNAPSHOT_JS)
        if str(snap["state"]).startswith("disconnected"):
            raise RuntimeError(f"the page disconnected: {snap['state']}")
        if snap.get("clear"):
            time.sleep(SETTLE_S)
            return
        if snap.get("finished"):
            return
        onset = snap.get("onset")
        if take.speaks and onset is not None and snap["now"] - onset > take.miss_after_s * 1000:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no outcome within {take.timeout_s:g} s")
        time.sleep(POLL_S)


def _read(page: sync_api.Page, out: PageOutcome) -> None:
    snap = page.evaluate(SNAPSHOT_JS)
    room = page.evaluate("window.__echoRoom")
    out.answer_id = snap.get("rid")
    out.created = snap.get("created")
    out.first_audio = snap.get("first_audio")
    out.onset = snap.get("onset")
    clear = snap.get("clear")
    if clear:
        out.cut, out.trigger = clear["t_trigger"], clear["trigger"]
    out.cleared = snap.get("cleared")
    out.done_status = snap.get("done")
    out.finished = bool(snap.get("finished"))
    if out.finished and snap.get("acks_t"):
        out.finished_at = snap["acks_t"][-1]
    out.speech_starts = list(snap.get("speech_starts") or [])
    out.played_ms = float(snap.get("played_ms") or 0.0)
    out.played_at_onset_ms = snap.get("played_at_onset")
    out.progress_acks = int(snap.get("progress_acks") or 0)
    echo = room["echo"]
    if echo["active_n"]:
        out.echo_rms = math.sqrt(echo["active_sumsq"] / echo["active_n"])
    out.constraints = room["constraints"]
    out.mic_at = room["mic_at"]
    out.errors += [f"room: {e}" for e in room["errors"]]
    if not room["mic"]:
        out.errors.append("room: the page's microphone was not wrapped")
    lines = [x for x in page.inner_text("#log").splitlines() if ".delta" not in x]
    out.log = "\n".join(lines[-40:])


# --- the bench ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    levels_db: tuple[float, ...] = LEVELS_DB
    # Per level and kind (echo alone, interruption), cancellation on: 50 echo-alone answers
    # per level, so one false barge-in is 2% (the target's bound; with 25 it read 4%).
    runs: int = 50
    off_runs: int = 2  # echo alone per level, cancellation off (the reference)
    seed: int = 34


QUICK = Run(levels_db=(0.0,), runs=1, off_runs=1)


@dataclass
class Session:
    item: EchoItem
    cancellation: bool
    page: PageOutcome
    culprit: dict[str, Any] | None = None  # rule 6: an echo verdict, for a false barge-in


def culprit(verdicts: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Rule 6: the first verdict whose chunk turn detection heard at the threshold."""
    return next((v for v in verdicts if v["heard"] >= THRESHOLD), None)


def _traced(verdict: dict[str, Any]) -> str:
    """Rule 6: one culprit chunk as the notes say it."""

    def db(key: str) -> str:
        value = verdict[key]
        return "-" if value is None else f"{value:.1f}"

    if verdict["vouched"]:
        passed = "vouched for by rule 13 (sure speech)"
    else:
        passed = "let through by rules 7, 8 and 10"
    trained = "trained" if verdict["trained"] else "not yet trained"
    moved = "never moved by an ACK"
    if verdict.get("reference_moved_ms") is not None:
        moved = (
            f"last moved {verdict['reference_moved_by_ms']:+d} ms by an ACK "
            f"{verdict['reference_moved_ms']} ms before"
        )
    return (
        f"chunk ending at {verdict['chunk_end_ms']} ms of input, VAD {verdict['probability']:.2f}, "
        f"{passed}: rule 10's excess {db('excess_db')} dB (its filter {trained}), "
        f"microphone / cleaned / echo {db('microphone_db')} / {db('cleaned_db')} / "
        f"{db('echo_db')} dBFS, the reference last played {verdict['since_played_ms']} ms before"
        f" and {moved}"
    )


@dataclass
class Measured:
    sessions: list[Session] = field(default_factory=list)
    browser: str = ""
    answer_s: float = 0.0
    load: machine_load.Load | None = None


def items(run: Run) -> list[tuple[EchoItem, bool]]:
    """(item, cancellation) for every session of `run` (rule 4), in a fixed order."""

    def plan(kinds: tuple[Any, ...], seeds: int, seed: int) -> Plan:
        return Plan(
            voices=("cascade",),
            levels_db=run.levels_db,
            delays_ms=(DELAY_MS,),
            kinds=kinds,
            seeds=seeds,
            echo_free=0,
            seed=seed,
        )

    on = [(i, True) for i in build(plan(("echo", "interruption"), run.runs, run.seed))]
    off: list[tuple[EchoItem, bool]] = []
    if run.off_runs:
        off = [(i, False) for i in build(plan(("echo",), run.off_runs, run.seed + 1))]
    return on + off


def take_for(item: EchoItem, cancellation: bool, answer_s: float) -> Take:
    """The wav and session of one item (rule 4): the room's tone, and the user's speech
    `offset_s` after the answer's expected first audio."""
    seed = item.room.seed if item.room is not None else 0
    total = LEAD_S + answer_s + 4.0
    mic = room_tone(total, seed)
    if item.user is not None:
        start = round((LEAD_S + item.offset_s) * RATE)
        end = min(mic.size, start + item.user.audio.size)
        mic[start:end] += item.user.audio[: end - start]
    return Take(
        mic=mic,
        room=item.room,
        cancellation=cancellation,
        ask=QUESTION,
        speaks=item.user is not None,
        session={"max_output_tokens": math.ceil(answer_s / CHUNK_S) + 4},
        timeout_s=total + 15.0,
    )


def measure(run: Run, announce: Callable[[str], None] = lambda _: None) -> Measured:
    load_before = machine_load.mark()
    voice = answer("cascade")
    measured = Measured(answer_s=voice.size / RATE)
    with (
        machine_load.adopted(),  # the browser's helpers are the bench's work (machine_load rule 4)
        tempfile.TemporaryDirectory(prefix="bench-echo-page-") as temp,
        servers.triton(MODELS, null_audio=write_wav(Path(temp) / "joe.wav", voice)) as triton,
    ):
        folder = Path(temp)
        server = servers.RealtimeProcess(
            triton.grpc_url, "null", instrumented=servers.Instrumented(), ready_timeout_s=60
        )
        try:
            with sync_api.sync_playwright() as driver:
                todo = items(run)
                for n, (item, cancellation) in enumerate(todo, 1):
                    take = take_for(item, cancellation, measured.answer_s)
                    page = run_session(driver, server.http, take, folder)
                    # Rule 6: the verdicts since the last session's are this session's.
                    verdicts = server.ask("verdicts")["verdicts"]
                    traced = culprit(verdicts) if page.cut_by_echo else None
                    measured.sessions.append(Session(item, cancellation, page, traced))
                    measured.browser = measured.browser or page.browser
                    announce(f"{n}/{len(todo)} {item.name} {_setting(cancellation)}: {_said(page)}")
        finally:
            server.close()
    measured.load = machine_load.Load(load_before, machine_load.mark())
    return measured


def _said(page: PageOutcome) -> str:
    """One line of progress per session."""
    if page.errors:
        return page.errors[0]
    lead = f"first audio {page.lead_s:.2f} s after the microphone opened"
    if page.cut_by_echo:
        return f"cut by echo ({page.trigger}); {lead}"
    if page.interrupted:
        return (
            f"interrupted {page.latency_s * 1000:.0f} ms after the onset "
            f"({page.offset_s:.2f} s into the answer); {lead}"
        )
    return f"{'heard in full' if page.finished else 'not cut'}; {lead}"


# --- the section ----------------------------------------------------------------------------


def _setting(cancellation: bool) -> str:
    return "on" if cancellation else "off"


def _share(sessions: list[Session], test: Callable[[PageOutcome], bool], ci: bool = False) -> str:
    part = sum(test(s.page) for s in sessions)
    return report.share_ci(part, len(sessions)) if ci else report.share(part, len(sessions))


COLUMNS = (
    "cancellation",
    "echo level",
    "sessions (echo alone + interruption)",
    "false barge-ins (echo alone)",
    "echo heard as speech",
    "interruptions cut by echo first",
    "interruptions missed",
    "onset -> page cut",
    "onset -> cleared",
    "user offset s",
    "echo in the page, dB",
    "progress ACKs / s",
)


def _row(measured: Measured, cancellation: bool, level: str) -> str:
    mine = [
        s
        for s in measured.sessions
        if s.cancellation == cancellation and s.item.level == level and not s.page.errors
    ]
    if not mine:
        return ""
    echo = [s for s in mine if s.item.kind == "echo"]
    speech = [s for s in mine if s.item.kind == "interruption"]
    playing = [s for s in speech if s.page.playing_at_onset]
    rates = [
        s.page.progress_acks / (s.page.played_ms / 1000)
        for s in mine
        if s.page.played_ms > 1000 and cancellation
    ]
    cells = [
        _setting(cancellation),
        level,
        f"{len(echo)} + {len(speech)}",
        _share(echo, lambda p: p.cut_by_echo, ci=True),
        _share(echo, lambda p: p.echo_speech),
        _share(speech, lambda p: p.cut_by_echo),
        _share(playing, lambda p: not p.interrupted),
        report.median_p90([s.page.latency_s for s in playing]),
        report.median_p90([s.page.cleared_latency_s for s in playing]),
        _median([s.page.offset_s for s in speech], ".2f"),
        _median([s.page.echo_db for s in mine], ".1f"),
        _median(rates, ".1f") if cancellation else "-",
    ]
    return "| " + " | ".join(cells) + " |"


def _median(values: Sequence[float], spec: str) -> str:
    kept = stats.finite(values)
    return format(stats.median(kept), spec) if kept else "-"


def table(run: Run, measured: Measured, command: str) -> str:
    levels = list(dict.fromkeys(s.item.level for s in measured.sessions))
    rows = [
        _row(measured, cancellation, level) for cancellation in (True, False) for level in levels
    ]
    sources = sorted({s.item.user.source for s in measured.sessions if s.item.user})
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU; Python {sys.version.split()[0]}; "
        f"Chromium {measured.browser or '?'} headless; {len(measured.sessions)} page sessions, "
        "one at a time).",
        "",
        *machine_load.lines(measured.load),
        "The bundled page in headless Chromium (Playwright), its microphone a wav file, hearing "
        "its own loudspeaker through a room: a test-only audio graph injected before the page "
        "loads (bench/echo_page.py `ROOM_JS`: the page's getUserMedia returns the fake "
        "microphone plus whatever the page connects to its destination, through a DelayNode "
        f"of {DELAY_MS:g} ms and a ConvolverNode with bench/rooms.py's impulse response: "
        "rt60 0.2/0.4/0.6 s, loudspeaker to microphone 0.1/0.5/1.5 m, a seeded room per "
        f"session). The page plays with its own worklet and sends its own ACKs (progress ACKs "
        f"with `input_ms` while echo cancellation is on). Pipeline `null` answering with the "
        f"cascade's voice (Piper joe, {measured.answer_s:.1f} s) to a typed question; the "
        "page's form: server VAD, silence 500 ms, interrupt on speech, immediate mode. "
        f"Sessions: echo alone + an interruption (bench/echo_corpus.py; user speech from "
        f"{', '.join(sources) or '-'}) at 0.5/1.5/3 s after the expected first audio. Onset: "
        "the user's first sample in the page's audio thread; page cut: the page cut the answer "
        "off (at `speech_started`, or the server's clear); times in ms, median / p90, the "
        "page's clock. Echo in the page: the echo's active level there against the user's "
        "speech level.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---|---:|" + "---:|" * (len(COLUMNS) - 3),
        *[r for r in rows if r],
        "",
        *_notes(measured),
        *_targets(measured),
    ]
    return "\n".join(lines) + "\n"


def _notes(measured: Measured) -> list[str]:
    false = [s for s in measured.sessions if s.cancellation and s.page.cut_by_echo]
    missed = [
        s
        for s in measured.sessions
        if s.cancellation and s.page.playing_at_onset and not s.page.interrupted
    ]
    lines = notes(
        [(s.item.name, s.page.first_audio, s.page.cut) for s in false],
        [(s.item.name, s.page.first_audio, s.page.onset) for s in missed],
        cut_label="Cut by echo with cancellation on (after the answer's first audio)",
        per_second=1000,  # the page's clock (rule 2)
    )
    traced = [f"- {s.item.name}: {_traced(s.culprit)}" for s in false if s.culprit is not None]
    if traced:
        lines.append("What the server's echo rules made of the chunk that started each (rule 6):")
        lines += traced
    late = [
        s for s in measured.sessions if s.item.kind == "interruption" and not s.page.errors
        and not s.page.playing_at_onset and not s.page.cut_by_echo
    ]  # fmt: skip
    if late:
        lines.append(f"Interruptions that did not come over a playing answer: {len(late)}.")
    failed = [s for s in measured.sessions if s.page.errors]
    if failed:
        lines.append(f"Sessions with errors (left out of the table): {len(failed)}.")
        for s in failed[:3]:
            lines.append(f"- {s.item.name} ({_setting(s.cancellation)}): {s.page.errors[0]}")
    return [*lines, ""] if lines else []


def _targets(measured: Measured) -> list[str]:
    echo = [
        s
        for s in measured.sessions
        if s.cancellation and s.item.kind == "echo" and not s.page.errors
    ]
    part = sum(s.page.cut_by_echo for s in echo)
    worst, per_level = 0.0, []
    for level in dict.fromkeys(s.item.level for s in echo):
        at = [s for s in echo if s.item.level == level]
        share = sum(s.page.cut_by_echo for s in at) / len(at)
        worst = max(worst, share)
        per_level.append(f"{level} {share:.0%}")
    ok = bool(echo) and worst <= FALSE_TARGET
    quiet = measured.load is None or measured.load.quiet
    return [
        "Target (cancellation on):",
        "",
        f"- the page's false barge-ins from echo alone <= {FALSE_TARGET:.0%} at every level: "
        f"worst {worst:.1%} ({', '.join(per_level) or '-'}; all levels "
        f"{report.share_ci(part, len(echo))}), {'met' if ok else 'MISSED'}"
        + ("" if quiet else " (not a quiet machine: does not count)"),
        "",
    ]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="three sessions at 0 dB (CI)")
    parser.add_argument("--levels", default=",".join(f"{x:g}" for x in LEVELS_DB))
    parser.add_argument(
        "--runs", type=int, default=Run.runs, help="sessions per level and kind, cancellation on"
    )
    parser.add_argument(
        "--off-runs", type=int, default=2, help="echo-alone sessions per level, cancellation off"
    )
    parser.add_argument("--seed", type=int, default=34)


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    try:
        levels = tuple(float(x) for x in args.levels.split(","))
    except ValueError:
        raise cli.Usage("--levels: comma-separated dB, e.g. -10,0") from None
    if args.runs < 1 or args.off_runs < 0:
        raise cli.Usage("--runs: at least 1; --off-runs: at least 0")
    run = QUICK if args.quick else Run(levels, args.runs, args.off_runs, args.seed)
    measured = measure(run, announce=lambda line: print(line, file=sys.stderr, flush=True))
    return cli.Outcome(table(run, measured, command))


BENCH = cli.Bench("bench.echo_page", __doc__, report.DOC, _arguments, _run)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
