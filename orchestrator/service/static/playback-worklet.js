// Playback AudioWorklet: a PlaybackQueue (playback-core.js) rendered at the context's rate.
import { PlaybackQueue } from "./playback-core.js";

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = new PlaybackQueue();
    this.framesSinceStats = 0;
    this.port.onmessage = (event) => {
      const msg = event.data;
      if (msg.type === "push") {
        this.queue.push(msg.rid, new Int16Array(msg.samples));
      } else if (msg.type === "done") {
        this.queue.markDone(msg.rid);
      } else if (msg.type === "clear") {
        // Handled between two render quanta: the next quantum has nothing of msg.rid.
        const result = this.queue.clear(msg.rid);
        this.port.postMessage({ type: "cleared", ...result, frame: currentFrame });
      } else if (msg.type === "pause" || msg.type === "resume") {
        // Also between two render quanta: the next quantum is silent (pause) or plays on from
        // the sample after the last one rendered (resume). The reply says where the cursor
        // stands, so the page can show that a paused cursor stood still.
        const applied = msg.type === "pause" ? this.queue.pause(msg.rid) : this.queue.resume(msg.rid);
        this.port.postMessage({
          type: msg.type === "pause" ? "paused" : "resumed",
          rid: msg.rid,
          applied,
          played: this.queue.played(msg.rid),
          queued: this.queue.pending(msg.rid),
          frame: currentFrame,
        });
      }
    };
  }

  process(inputs, outputs) {
    const channels = outputs[0];
    const finished = this.queue.render(channels[0]);
    for (let c = 1; c < channels.length; c++) channels[c].set(channels[0]);
    // currentFrame is this quantum's first frame: reports say where the cursor stands after it.
    const frame = currentFrame + channels[0].length;
    for (const f of finished) this.port.postMessage({ type: "finished", ...f, frame });
    this.framesSinceStats += channels[0].length;
    if (this.framesSinceStats >= 1200) {
      this.framesSinceStats = 0;
      const rid = this.queue.current;
      this.port.postMessage({
        type: "stats",
        rid,
        played: rid === null ? 0 : this.queue.played(rid),
        paused: rid !== null && this.queue.isPaused(rid),
        queued: this.queue.length,
        pushed: this.queue.pushed,
        dropped: this.queue.dropped,
        frame,
      });
    }
    return true;
  }
}

registerProcessor("turntaker-playback", PlaybackProcessor);
