// The page's audio: the microphone through the capture worklet (20 ms chunks of pcm16) and the
// playback worklet to the speakers, in one AudioContext at the wire's rate. It carries samples
// and messages; what to play, pause or drop is the player's (player.js).
//
// The pipeline outlives a lost socket (the worklet plays on what it holds while the page
// reconnects) and stops only when the connection is over for good.

import { RATE } from "./player.js";

export class AudioPipeline {
  // onWorklet(msg): a report of the current playback worklet; onChunk(buffer, endFrame): 20 ms
  // of mic and the context frame it ended at.
  constructor({ onWorklet, onChunk }) {
    this.onWorklet = onWorklet;
    this.onChunk = onChunk;
    this.ctx = null;
    this.stream = null;
    this.playback = null; // the playback worklet node
    this.capture = null;
  }

  // "running" through a drop, "stopped" once the connection is over.
  get state() {
    return this.ctx ? this.ctx.state : "stopped";
  }

  // The player's worklet (player.js): live while there is one.
  get live() {
    return this.playback !== null;
  }

  post(msg, transfer = []) {
    if (this.playback) this.playback.port.postMessage(msg, transfer);
  }

  async start() {
    this.ctx = new AudioContext({ sampleRate: RATE });
    await this.ctx.audioWorklet.addModule("/static/capture-worklet.js");
    await this.ctx.audioWorklet.addModule("/static/playback-worklet.js");
    this.playback = this.newPlayback();
    // Off: they change the gain and the echo of what the server hears (BROWSER_NOTES).
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    const source = this.ctx.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(this.ctx, "turntaker-capture", { outputChannelCount: [1] });
    this.capture.port.onmessage = (e) => this.onChunk(e.data.samples, e.data.end);
    // The capture node must reach the destination to be pulled; silently.
    const mute = this.ctx.createGain();
    mute.gain.value = 0;
    source.connect(this.capture).connect(mute).connect(this.ctx.destination);
    await this.ctx.resume();
  }

  // A new conversation: the old one's queued audio goes with its worklet.
  renewPlayback() {
    if (!this.playback) return;
    this.playback.disconnect();
    this.playback = this.newPlayback();
  }

  newPlayback() {
    const node = new AudioWorkletNode(this.ctx, "turntaker-playback", {
      numberOfInputs: 0, outputChannelCount: [1],
    });
    node.port.onmessage = (e) => {
      // A replaced node's last reports (a new session started) are of a session that is gone.
      if (node === this.playback) this.onWorklet(e.data);
    };
    node.connect(this.ctx.destination);
    return node;
  }

  stop() {
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ctx) this.ctx.close();
    this.stream = this.ctx = this.playback = this.capture = null;
  }
}
