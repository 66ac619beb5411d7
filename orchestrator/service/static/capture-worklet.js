// Capture AudioWorklet: posts 20 ms chunks of pcm16 at the context's rate (24 kHz), each with
// the context frame it ended at (input-position.js places playback on the input with it).
class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.size = Math.round(sampleRate / 50);
    this.chunk = new Int16Array(this.size);
    this.fill = 0;
  }

  process(inputs, outputs) {
    const input = inputs[0];
    if (input && input.length > 0) {
      const samples = input[0];
      for (let i = 0; i < samples.length; i++) {
        const s = Math.max(-1, Math.min(1, samples[i]));
        this.chunk[this.fill++] = s < 0 ? s * 32768 : s * 32767;
        if (this.fill === this.size) {
          const end = currentFrame + i + 1;
          this.port.postMessage({ samples: this.chunk.buffer, end }, [this.chunk.buffer]);
          this.chunk = new Int16Array(this.size);
          this.fill = 0;
        }
      }
    }
    for (const channel of outputs[0] || []) channel.fill(0);
    return true;
  }
}

registerProcessor("turntaker-capture", CaptureProcessor);
