"""A labelled corpus of user turns for end-of-turn detection: complete turns and turns with a
pause in the middle (an inserted one for synthetic speech, real ones for human speech).

Each item is one user turn that starts at sample 0 (its onset); the client streams room tone
(`overlap_corpus.room_tone`) before, under and after it. Synthetic items are of two classes,
each a label:
- `complete`: a whole question or request ("What is the weather like in Paris today?",
  "Please turn off the light in the kitchen.", ...), spoken in one go: the turn ends where its
  speech ends, and only there;
- `paused`: the same sentence by the same voice with one mid-turn pause of `pauses_s`
  (seeded, 0.4-1.2 s by default, in whole 10 ms) at a word gap inside it ("I would like to
  book a table for" ... "four people tomorrow evening."): the turn does NOT end at the pause.

How a pause is made (docs: ../shared/TURN_TAKING_NOTES.md, "Synthetic speech is a weak
judge"): the WHOLE sentence is synthesised once and its audio cut at a word gap, so the part
before the pause keeps the continuing intonation of a sentence that goes on (a fragment
synthesised on its own is spoken as a finished sentence). Every sentence marks its planned
word boundary with `|`; the engine's own timing gives the boundary's time (flite's segment
end times, `-psdur`, counted up to the prefix's phones; festival's `word_end`), then the cut
goes to the quietest 10 ms window within 40 ms of it (the energy envelope's gap; its RMS is
kept as `gap_rms`). The pause is digital silence in the item (the microphone's room tone is
laid under it by the session), with 5 ms fades either side of the cut. Boundaries are planned
next to a stop or a fricative ("light | in", "pick up | the"), where the signal has a gap;
between two voiced sounds ("call | my") it has none.

Labels on each item, in samples of `rate`: `speech_end` (the end of its last 10 ms frame
louder than `SPEECH_FLOOR` RMS: where the turn really ends), `segments` (the spans of speech,
whole 10 ms frames: one, or two either side of the pause; the frame holding the cut counts as
speech), `pause_at` and `pause_len` (where the inserted silence
starts and how long it is; None and 0 for complete turns).

Voices: flite `slt`, `kal16`, `awb`, `rms` and festival's default voice (`kal_diphone`, with
phrase breaks at punctuation only: its default phrasing puts pauses of up to 0.4 s of its own
inside some sentences, and a complete turn must have none); each sentence by
`voices_per_sentence` of them, taking turns (sentence i by VOICES[i], VOICES[i+1], ...), each
(sentence, voice) as a complete and a paused item. Speech is cut to its spoken part
(10 ms frames above an RMS of 0.02, both ends) and scaled to an active level of -20 dBFS.

Human items (`origin` "human", bench/human_turns.py; `voice` is the package's key, the
per-source rows' "human/<source>"), next to the synthetic ones: `human_turns` real user turns,
each ONE item with its REAL pauses (nothing put in), onset at sample 0 and ending at its last
speech (`HumanTurn.speech_end`):
- held: a turn with at least one held pause of `HELD_PAUSE_S` (0.3 s) or more (the speaker
  went on after it: mfa's spontaneous speech with its fillers and silences, asterisk's
  multi-sentence prompts, beckett's short sentences); `segments` are the speech spans between
  those pauses, so a commit before the final segment ends cut the turn off; `pauses` lists
  them, and `pause_at` / `pause_len` give the longest;
- complete: a turn without such a pause (shorter ones, word gaps and stop closures, may be
  inside): one segment.
The human turns' labels are bench/human_turns.py's (10 ms frames against a floor relative to
the recording's own speech and noise, not `SPEECH_FLOOR`); their level is the same -20 dBFS.
Held and complete items take turns (held first), each class in human_turns' order (the sources
taking turns), so any `human_turns` of 2 or more holds both classes.

Deterministic: the same `CorpusPlan` gives the same samples (flite and festival are
deterministic, the human files fixed; each pause length comes from
`numpy.random.default_rng([seed, i, voice])`). Synthesis
goes through temporary files only; nothing is cached.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from bench import human_turns as human_turn_corpus
from bench.speech import RATE, Audio, read_wav

Kind = Literal["complete", "paused", "held"]
Origin = Literal["synthetic", "human"]
KINDS: tuple[Kind, ...] = ("complete", "paused", "held")
# The classes whose turn goes on after a pause: a commit at the pause cuts it off.
HELD_KINDS: tuple[Kind, ...] = ("paused", "held")
ORIGINS: tuple[Origin, ...] = ("synthetic", "human")
VOICES = ("slt", "kal16", "awb", "rms", "festival")
# `|` is the planned word boundary of the pause; never a boundary next to punctuation.
SENTENCES = (
    "What is the weather like in | Paris today?",
    "Please turn off the light in the | kitchen.",
    "I would like to book a table for | four people tomorrow evening.",
    "Can you remind me to pick up the | kids at six?",
    "How long does it take to get to the | station by bus?",
    "Could you play a song by | Taylor Swift?",
    "What time does the | pharmacy close on Sunday?",
    "Send a text to | Kate saying I will be late.",
    "Tell me how many calories there are in | two bananas.",
    "Can you find me a hotel near | Paddington station?",
)

SPEECH_RMS = 0.1  # -20 dBFS, over the spoken part
SPEECH_FLOOR = 0.01  # -40 dBFS: a 10 ms frame above it is speech (labels)
SPOKEN_THRESHOLD = 0.02  # what `spoken_part` trims the synthesiser's own silence with
SEARCH_S = 0.04  # how far from the engine's word boundary the cut may move
FADE_S = 0.005
FRAME_S = 0.01
HUMAN_TURNS_MAX = 150
HELD_PAUSE_S = 0.3  # a human turn with a real pause this long inside is a `held` item


@dataclass(frozen=True)
class CorpusPlan:
    """How many sentences, each by how many voices, and the pauses' range (seconds)."""

    sentences: int = 8
    voices_per_sentence: int = 3
    pauses_s: tuple[float, float] = (0.4, 1.2)
    seed: int = 21
    rate: int = RATE
    human_turns: int = 80  # real human turns, each one `held` or `complete` item

    def __post_init__(self) -> None:
        if not 1 <= self.sentences <= len(SENTENCES):
            raise ValueError(f"1..{len(SENTENCES)} sentences")
        if not 1 <= self.voices_per_sentence <= len(VOICES):
            raise ValueError(f"1..{len(VOICES)} voices per sentence")
        low, high = self.pauses_s
        if not 0.1 <= low <= high <= 5.0:
            raise ValueError("pauses_s: 0.1 <= low <= high <= 5 s")
        if self.rate % 100:
            raise ValueError("the rate must hold whole 10 ms frames")
        if not 0 <= self.human_turns <= HUMAN_TURNS_MAX:
            raise ValueError(f"0..{HUMAN_TURNS_MAX} human turns")


@dataclass(frozen=True, eq=False)
class TurnItem:
    """One user turn: its audio (onset at sample 0), class and labels (sample indices)."""

    name: str
    kind: Kind
    text: str  # the whole sentence, without the `|`
    voice: str  # a flite voice or "festival"; a human item's package key ("mfa")
    audio: Audio
    rate: int
    speech_end: int  # end of the last 10 ms frame above SPEECH_FLOOR
    segments: tuple[tuple[int, int], ...]  # speech spans [start, end), in order
    pause_at: int | None = None  # first sample of the (longest) pause, paused and held items
    pause_len: int = 0
    before: str = ""  # the words before the pause ("" for complete items)
    after: str = ""
    gap_rms: float | None = None  # the whole sentence's 10 ms RMS where it was cut
    origin: Origin = "synthetic"
    recording: str = ""  # a human item's turn (human_turns.HumanTurn.name)
    pauses: tuple[tuple[int, int], ...] = ()  # every mid-turn pause [start, end), in order

    @property
    def held(self) -> bool:
        """A turn that goes on after a pause (`paused` or `held`)."""
        return self.kind in HELD_KINDS

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.rate

    @property
    def pause_s(self) -> float:
        return self.pause_len / self.rate

    @property
    def final_segment(self) -> tuple[int, int]:
        """The speech after which the turn really ends: a commit before its end cut it off."""
        return self.segments[-1]


def frame_rms(audio: Audio, rate: int) -> Audio:
    """RMS of each whole 10 ms frame of `audio`."""
    frame = int(rate * FRAME_S)
    frames = audio[: len(audio) // frame * frame].reshape(-1, frame)
    return np.asarray(np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1)), np.float32)


def speech_segments(
    audio: Audio, rate: int, floor: float = SPEECH_FLOOR, min_gap_s: float = 0.3
) -> tuple[tuple[int, int], ...]:
    """Spans of 10 ms frames above `floor`, gaps shorter than `min_gap_s` bridged (word gaps
    and stop closures are not pauses), as sample [start, end)."""
    frame = int(rate * FRAME_S)
    loud = np.flatnonzero(frame_rms(audio, rate) > floor)
    if not loud.size:
        return ()
    spans: list[tuple[int, int]] = []
    start = prev = int(loud[0])
    for i in (int(x) for x in loud[1:]):
        if (i - prev - 1) * frame >= min_gap_s * rate:
            spans.append((start * frame, (prev + 1) * frame))
            start = i
        prev = i
    spans.append((start * frame, (prev + 1) * frame))
    return tuple(spans)


def _festival(text: str, prefix: list[str], rate: int) -> tuple[Audio, float]:
    """Festival's default voice: the audio of `text` and the end time (s) of its first words,
    `prefix`."""
    binary = shutil.which("festival")
    assert binary, "festival is not installed: `make test` installs it (APT_PACKAGES)"
    assert '"' not in text and "\\" not in text, "festival text must not hold quotes"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        # Phrase breaks at punctuation only: festival's default phrasing may put a pause of
        # its own (up to 0.4 s) inside a sentence, and a complete turn must have none.
        script = (
            "(begin (Parameter.set (quote Phrase_Method) (quote cart_tree))"
            " (set! phrase_cart_tree simple_phrase_cart_tree)"
            f' (set! u (SynthText "{text}"))'
            f'(utt.save.wave u "{path}" (quote riff))'
            '(mapcar (lambda (w) (format t "%s %f\\n" (item.name w) (item.feat w "word_end")))'
            " (utt.relation.items u (quote Word))))"
        )
        printed = subprocess.run(
            [binary, "-b", script], check=True, capture_output=True, text=True
        ).stdout
        audio = read_wav(path, rate)
    words = [line.split() for line in printed.splitlines() if line.strip()]
    said = [word.lower() for word, _ in words[: len(prefix)]]
    expected = ["".join(c for c in w.lower() if c.isalnum()) for w in prefix]
    assert said == expected, f"festival split {text!r} into other words: {said} != {expected}"
    return audio, float(words[len(prefix) - 1][1])


def _flite_phones(command: list[str]) -> list[str]:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()


def _flite(text: str, prefix: str, voice: str, rate: int) -> tuple[Audio, float]:
    """flite's `voice`: the audio of `text` and the end time (s) of its first words, `prefix`:
    the prefix's phones (synthesised alone, pauses left out) counted off the whole sentence's
    segment end times (`-psdur`)."""
    binary = shutil.which("flite")
    assert binary, "flite is not installed: `make test` installs it with apt (APT_PACKAGES)"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        timed = _flite_phones([binary, "-voice", voice, "-psdur", "-t", text, "-o", str(path)])
        audio = read_wav(path, rate)
    alone = _flite_phones([binary, "-voice", voice, "-ps", "-t", prefix, "-o", "none"])
    head = [p for p in alone if p != "pau"]
    segments = [(name, float(end)) for name, end in (s.rsplit(":", 1) for s in timed)]
    spoken = [(name, end) for name, end in segments if name != "pau"]
    names = [name for name, _ in spoken[: len(head)]]
    assert names == head, f"{voice}: {prefix!r} is not spoken the same inside {text!r}"
    return audio, spoken[len(head) - 1][1]


def _spoken_span(audio: Audio, rate: int) -> tuple[int, int]:
    """[start, end) of the spoken part, as bench.speech.spoken_part cuts it."""
    frame = int(rate * FRAME_S)
    head = np.flatnonzero(frame_rms(audio, rate) > SPOKEN_THRESHOLD)
    tail = np.flatnonzero(frame_rms(audio[::-1].copy(), rate) > SPOKEN_THRESHOLD)
    if not head.size:
        return 0, len(audio)
    return int(head[0]) * frame, len(audio) - int(tail[0]) * frame


def _quietest(audio: Audio, around: int, rate: int) -> int:
    """The centre of the quietest 10 ms window within SEARCH_S of sample `around`."""
    half, reach = int(rate * FRAME_S / 2), int(rate * SEARCH_S)
    lo, hi = max(half, around - reach), min(len(audio) - half, around + reach)
    power = np.concatenate([[0.0], np.cumsum(audio.astype(np.float64) ** 2)])
    centres = np.arange(lo, hi + 1)
    energy = power[centres + half] - power[centres - half]
    return int(centres[int(np.argmin(energy))])


def synthesize(text: str, voice: str, rate: int = RATE) -> tuple[Audio, int]:
    """`text` with its `|` spoken by `voice` as one sentence, cut to its spoken part and at
    -20 dBFS active level; and the sample of its word gap at the `|` (the quietest point near
    the engine's own boundary)."""
    prefix, _ = (part.strip() for part in text.split("|"))
    whole = " ".join(text.replace("|", " ").split())
    if voice == "festival":
        audio, boundary_s = _festival(whole, prefix.split(), rate)
    else:
        audio, boundary_s = _flite(whole, prefix, voice, rate)
    start, end = _spoken_span(audio, rate)
    spoken = audio[start:end]
    loud = frame_rms(spoken, rate)
    active = float(np.sqrt((loud[loud > SPOKEN_THRESHOLD] ** 2).mean()))
    spoken = np.asarray(np.clip(spoken * (SPEECH_RMS / active), -1.0, 1.0), np.float32)
    return spoken, _quietest(spoken, round(boundary_s * rate) - start, rate)


def window_rms(audio: Audio, centre: int, rate: int) -> float:
    """RMS of the 10 ms window of `audio` centred on sample `centre`."""
    half = int(rate * FRAME_S / 2)
    part = audio[max(0, centre - half) : centre + half].astype(np.float64)
    return float(np.sqrt((part**2).mean())) if part.size else 0.0


def _faded(audio: Audio, rate: int, out: bool) -> Audio:
    n = min(len(audio), int(rate * FADE_S))
    ramp = np.linspace(1.0, 0.0, n, dtype=np.float32) if out else np.linspace(0.0, 1.0, n)
    audio = audio.copy()
    if out:
        audio[len(audio) - n :] *= ramp
    else:
        audio[:n] *= ramp.astype(np.float32)
    return audio


def build_corpus(plan: CorpusPlan = CorpusPlan()) -> tuple[TurnItem, ...]:
    """Every item of `plan`: per sentence and voice, the complete item then the paused one;
    then the human items."""
    items: list[TurnItem] = []
    rate = plan.rate
    for i, marked in enumerate(SENTENCES[: plan.sentences]):
        before, after = (part.strip() for part in marked.split("|"))
        text = f"{before} {after}"
        for k in range(plan.voices_per_sentence):
            v = (i + k) % len(VOICES)
            voice = VOICES[v]
            speech, cut = synthesize(marked, voice, rate)
            items.append(_item("complete", text, voice, speech, rate))
            rng = np.random.default_rng([plan.seed, i, v])
            pause_len = round(rng.uniform(*plan.pauses_s) * 100) * rate // 100
            parts = [
                _faded(speech[:cut], rate, out=True),
                np.zeros(pause_len, np.float32),
                _faded(speech[cut:], rate, out=False),
            ]
            paused = np.concatenate(parts).astype(np.float32)
            gap = window_rms(speech, cut, rate)
            items.append(
                _item("paused", text, voice, paused, rate, cut, pause_len, before, after, gap)
            )
    if plan.human_turns:
        items += human_items(plan)
    return tuple(items)


def human_items(plan: CorpusPlan) -> list[TurnItem]:
    """`plan.human_turns` real human turns (bench/human_turns.py) as items: `held` and
    `complete` taking turns, held first, each in human_turns' order."""
    held: list[TurnItem] = []
    complete: list[TurnItem] = []
    for turn in human_turn_corpus.human_turns(plan.rate):
        item = human_item(turn)
        (held if item.kind == "held" else complete).append(item)
    mixed = [it for pair in zip(held, complete, strict=False) for it in pair]
    n = min(len(held), len(complete))
    mixed += held[n:] + complete[n:]
    return mixed[: plan.human_turns]


def human_item(turn: human_turn_corpus.HumanTurn) -> TurnItem:
    """One human turn as an item: from its onset to its last speech, its real pauses of
    HELD_PAUSE_S or more splitting its segments."""
    onset = turn.onset
    audio = np.ascontiguousarray(turn.audio[onset : turn.speech_end])
    segments = tuple((a - onset, b - onset) for a, b in turn.segments(HELD_PAUSE_S))
    pauses = tuple((a, b) for (_, a), (b, _) in itertools.pairwise(segments))
    kind: Kind = "held" if pauses else "complete"
    longest = max(pauses, key=lambda p: p[1] - p[0], default=None)
    slug = "-".join(
        "".join(c if c.isalnum() else " " for c in turn.name.split("/", 1)[1].lower()).split()
    )
    return TurnItem(
        name=f"{kind}/human/{turn.source}/{slug}",
        kind=kind,
        text=turn.transcript or "",
        voice=turn.source,
        audio=audio,
        rate=turn.rate,
        speech_end=segments[-1][1],
        segments=segments,
        pause_at=None if longest is None else longest[0],
        pause_len=0 if longest is None else longest[1] - longest[0],
        origin="human",
        recording=turn.name,
        pauses=pauses,
    )


def _item(
    kind: Kind,
    text: str,
    voice: str,
    audio: Audio,
    rate: int,
    pause_at: int | None = None,
    pause_len: int = 0,
    before: str = "",
    after: str = "",
    gap_rms: float | None = None,
) -> TurnItem:
    slug = "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split()[:5])
    # Frames of the whole item (so a paused item's frames after the pause are its complete
    # twin's, shifted by whole frames); the pause splits the speech in two.
    spans = speech_segments(audio, rate)
    segments: tuple[tuple[int, int], ...] = ((spans[0][0], spans[-1][1]),)
    if pause_at is not None:
        middle = pause_at + pause_len // 2
        head = [span for span in spans if span[1] <= middle]
        tail = [span for span in spans if span[0] >= middle]
        segments = ((head[0][0], head[-1][1]), (tail[0][0], tail[-1][1]))
    name = f"{kind}/{voice}/{slug}"
    if pause_at is not None:
        name += f"@{pause_len / rate:.2f}s"
    return TurnItem(
        name=name,
        kind=kind,
        text=text,
        voice=voice,
        audio=audio,
        rate=rate,
        speech_end=segments[-1][1],
        segments=segments,
        pause_at=pause_at,
        pause_len=pause_len,
        before=before,
        after=after,
        gap_rms=gap_rms,
        pauses=() if pause_at is None else ((pause_at, pause_at + pause_len),),
    )
