// Playback queue shared by playback-worklet.js and the node unit tests (tests/js/).
// A ring buffer of Int16 samples; runs of samples are tagged with their response id.
// Three ways a response's audio stops: clear (dropped for good, later deltas discarded), pause
// (kept and still growing, resumed from the exact sample: the interruption policy's pause mode,
// REALTIME_CONTRACT v2) and its natural end (finished, reported once).

export class BoundedSet {
  constructor(limit = 64) {
    this.limit = limit;
    this.items = new Set();
  }
  add(value) {
    if (this.items.has(value)) return;
    this.items.add(value);
    while (this.items.size > this.limit) {
      // A Set iterates in insertion order: the first value is the oldest.
      this.items.delete(this.items.values().next().value);
    }
  }
  has(value) {
    return this.items.has(value);
  }
  delete(value) {
    return this.items.delete(value);
  }
  get size() {
    return this.items.size;
  }
}

export class PlaybackQueue {
  constructor({ capacity = 24000 * 120, maxRemembered = 64 } = {}) {
    this.ring = new Int16Array(capacity);
    this.read = 0; // ring index of the next sample to play
    this.length = 0; // samples queued
    this.segments = []; // [{rid, count}] in play order; counts sum to length
    this.interrupted = new BoundedSet(maxRemembered);
    this.maxRemembered = maxRemembered;
    this.playedBy = new Map(); // rid -> samples rendered (bounded, oldest evicted)
    this.done = new Set(); // rids whose last delta arrived and not yet reported finished
    this.finished = new BoundedSet(maxRemembered); // rids played to their end (reported)
    // rids whose playback is held where it stands. Bounded like the rest: the server pauses
    // only its latest response, so more than one at a time is already a protocol fault.
    this.paused = new BoundedSet(maxRemembered);
    this.pushed = 0;
    this.dropped = 0;
    this.overflow = 0;
    this.current = null; // rid of the sample rendered last
  }

  _touch(rid) {
    if (!this.playedBy.has(rid)) {
      this.playedBy.set(rid, 0);
      while (this.playedBy.size > this.maxRemembered) {
        this.playedBy.delete(this.playedBy.keys().next().value);
      }
    }
  }

  played(rid) {
    return this.playedBy.get(rid) ?? 0;
  }

  pending(rid) {
    let n = 0;
    for (const s of this.segments) if (s.rid === rid) n += s.count;
    return n;
  }

  isInterrupted(rid) {
    return this.interrupted.has(rid);
  }

  // Queue samples of a response; a late delta of an interrupted response is discarded.
  push(rid, samples) {
    if (this.interrupted.has(rid)) {
      this.dropped += samples.length;
      return 0;
    }
    this._touch(rid);
    const cap = this.ring.length;
    const n = Math.min(samples.length, cap - this.length);
    this.overflow += samples.length - n;
    let write = (this.read + this.length) % cap;
    const first = Math.min(n, cap - write);
    this.ring.set(samples.subarray(0, first), write);
    if (n > first) this.ring.set(samples.subarray(first, n), 0);
    this.length += n;
    this.pushed += n;
    const last = this.segments[this.segments.length - 1];
    if (last && last.rid === rid) last.count += n;
    else if (n > 0) this.segments.push({ rid, count: n });
    return n;
  }

  // The response's last delta has arrived: report it finished once all of it played.
  markDone(rid) {
    if (!this.interrupted.has(rid)) this.done.add(rid);
  }

  isPaused(rid) {
    return this.paused.has(rid);
  }

  // Hold `rid` where it stands: nothing of it (nor anything queued after it) is rendered, its
  // samples stay queued and later pushes still queue, its played cursor stands still. A pause
  // of a response that was cleared or already played to its end is stale: nothing happens,
  // so that a late pause can never silence the response playing now. Returns whether it paused.
  pause(rid) {
    if (this.interrupted.has(rid) || this.finished.has(rid)) return false;
    this.paused.add(rid);
    return true;
  }

  // Play on from the exact sample where the pause stopped. Returns whether `rid` was paused.
  resume(rid) {
    return this.paused.delete(rid);
  }

  // Drop everything queued for `rid` at once; later pushes of it are discarded. A clear while
  // paused drops the kept queue too (the pause ends with it).
  clear(rid) {
    this.interrupted.add(rid);
    this.paused.delete(rid);
    this.done.delete(rid);
    let dropped = 0;
    if (this.segments.some((s) => s.rid === rid)) {
      const cap = this.ring.length;
      const kept = [];
      const copy = new Int16Array(this.length);
      let out = 0;
      let pos = this.read;
      for (const s of this.segments) {
        if (s.rid === rid) {
          dropped += s.count;
        } else {
          for (let i = 0; i < s.count; i++) copy[out + i] = this.ring[(pos + i) % cap];
          out += s.count;
          kept.push(s);
        }
        pos = (pos + s.count) % cap;
      }
      this.ring.set(copy.subarray(0, out), 0);
      this.read = 0;
      this.length = out;
      this.segments = kept;
    }
    this.dropped += dropped;
    return { rid, played: this.played(rid), dropped };
  }

  // Fill `out` (Float32Array) with the next samples; the rest is silence.
  // Returns the responses that finished playing during this call: [{rid, played}].
  render(out) {
    const cap = this.ring.length;
    let i = 0;
    while (i < out.length && this.segments.length > 0) {
      const seg = this.segments[0];
      // Segments play in order: a paused head holds everything behind it (the server runs one
      // response at a time, so nothing newer is queued behind a paused one anyway).
      if (this.paused.has(seg.rid)) break;
      const n = Math.min(seg.count, out.length - i);
      for (let k = 0; k < n; k++) {
        out[i + k] = this.ring[(this.read + k) % cap] / 32768;
      }
      this.read = (this.read + n) % cap;
      this.length -= n;
      seg.count -= n;
      i += n;
      this._touch(seg.rid);
      this.playedBy.set(seg.rid, this.playedBy.get(seg.rid) + n);
      this.current = seg.rid;
      if (seg.count === 0) this.segments.shift();
    }
    out.fill(0, i);
    const finished = [];
    for (const rid of this.done) {
      if (this.pending(rid) === 0) {
        this.done.delete(rid);
        this.finished.add(rid);
        finished.push({ rid, played: this.played(rid) });
      }
    }
    return finished;
  }
}
