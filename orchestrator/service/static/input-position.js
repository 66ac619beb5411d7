// Where the page's input stood at a frame of the AudioContext, as samples of input audio the
// server has been sent: what playback.ack's `input_ms` names (docs/protocol.md, "playback.ack":
// with it the server places the echo's reference on its input timeline exactly). Pure: the
// capture worklet stamps each chunk with the frame it ended at, the playback worklet each
// report with the frame it stood at; node tests it (tests/js/input-position.test.mjs).
//
// Rules:
// 1. Counted from the session's start: a new conversation starts again at 0, as the server's
//    input timeline does.
// 2. Only input sent counts: a chunk the connection could not send (a drop) never reached the
//    server's timeline.
// 3. Between chunks one frame is one sample (the capture runs at the context's rate): at frame
//    F the input stood at the samples sent through the last chunk sent, plus F less the frame
//    that chunk ended at (less, for a frame before it). Before a chunk was sent, unknown: null.

export class InputPosition {
  constructor() {
    this.reset();
  }

  // Rule 1.
  reset() {
    this.samples = 0; // sent so far (rule 2)
    this.endFrame = null; // the frame the last chunk sent ended at
  }

  // A chunk of `samples` that ended at `endFrame` went out (rule 2).
  sent(samples, endFrame) {
    this.samples += samples;
    this.endFrame = endFrame;
  }

  // Rule 3: samples of input at `frame`, or null.
  at(frame) {
    if (this.endFrame === null || frame === null || frame === undefined) return null;
    return Math.max(0, this.samples + (frame - this.endFrame));
  }
}
