// The turn-taking timeline on the page: the model (timeline-model.js) drawn on a <canvas>, a
// lane for the user and one for the assistant, 'now' at the right edge. It listens to the
// page's emitter (emitter.js) as the debug record does, and changes nothing in the page.
//
// Rules:
// 1. While a session is live the canvas is redrawn every animation frame, so it scrolls; once
//    the connection is over it is drawn once more and stands still.
// 2. The wheel scrolls back through the kept history (timeline-model.js rule 5); a double
//    click comes back to 'now'.
// 3. What the canvas shows is also a list (visually hidden) that a screen reader reads in its
//    place, rebuilt when the model changes: the canvas alone says nothing to one.

import { describe, TimelineModel } from "./timeline-model.js";

export const WINDOW_MS = 20000; // the width of the canvas, in ms
const HEIGHT = 180;
const GUTTER = 78;
const LANES = {
  user: { bar: 34, labels: [12, 25], labelDir: -1 },
  assistant: { bar: 90, labels: [124, 137], labelDir: 1 },
};
const BAR = 18;
const AXIS = 152;
const COLORS = {
  speech: "#0550ae", overlap: "#bf8700", "barge-in": "#cf222e", backchannel: "#8250df",
  audio: "#1a7f37", paused: "#d4a72c",
  "end-of-turn": "#0550ae", decision: "#8250df", cut: "#cf222e", finished: "#1a7f37",
};

export class Timeline {
  // canvas: the <canvas>; list: the <ol> that stands for it (rule 3); emitter: the page's.
  constructor({ canvas, list, emitter, now = () => performance.now(),
                frame = (f) => requestAnimationFrame(f) }) {
    this.canvas = canvas;
    this.list = list;
    this.now = now;
    this.frame = frame;
    this.model = new TimelineModel(now);
    this.live = false;
    this.offset = 0; // ms scrolled back from now (rule 2)
    this.listed = -1; // the model version the list shows
    this.stoppedAt = null;
    emitter.on("session-start", () => {
      this.model.newSession();
      this.start();
    });
    emitter.on("wire", ({ dir, event }) => { if (dir === "<") this.model.server(event); });
    emitter.on("worklet", (msg) => this.model.worklet(msg));
    emitter.on("interrupt", ({ rid, trigger }) => this.model.interrupt(rid, trigger));
    emitter.on("mic", ({ samples }) => this.model.sent(samples));
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const max = Math.max(0, this.model.historyMs - WINDOW_MS);
      this.offset = Math.min(max, Math.max(0, this.offset + (e.deltaY || e.deltaX) * 20));
      if (!this.live) this.draw();
    }, { passive: false });
    canvas.addEventListener("dblclick", () => {
      this.offset = 0;
      if (!this.live) this.draw();
    });
    this.draw();
  }

  // Rule 1.
  start() {
    this.stoppedAt = null;
    if (this.live) return;
    this.live = true;
    const tick = () => {
      if (!this.live) return;
      this.draw();
      this.frame(tick);
    };
    this.frame(tick);
  }

  stop() {
    this.live = false;
    this.stoppedAt = this.now();
    this.draw();
  }

  draw() {
    if (this.listed !== this.model.version) this.relist();
    const ctx = this.canvas.getContext("2d");
    const dpr = globalThis.devicePixelRatio || 1;
    const width = this.canvas.clientWidth || 800;
    if (this.canvas.width !== Math.round(width * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(HEIGHT * dpr);
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, HEIGHT);
    const now = this.stoppedAt ?? this.now();
    const right = now - this.offset;
    const left = right - WINDOW_MS;
    const x = (t) => GUTTER + (t - left) / WINDOW_MS * (width - GUTTER - 6);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    this.drawAxis(ctx, left, right, x, width);
    for (const [lane, at] of Object.entries(LANES)) {
      ctx.fillStyle = "#f3f4f6";
      ctx.fillRect(GUTTER, at.bar, width - GUTTER - 6, BAR);
      ctx.fillStyle = "#222";
      ctx.fillText(lane, 6, at.bar + BAR / 2);
    }
    const items = this.model.items.filter((i) => (i.end ?? now) >= left && i.start <= right);
    for (const item of items) if (item.end !== item.start) this.drawSpan(ctx, item, x, now);
    const ends = { user: [-Infinity, -Infinity], assistant: [-Infinity, -Infinity] };
    for (const item of items) if (item.end === item.start) this.drawMark(ctx, item, x, ends);
    if (this.offset > 0) {
      ctx.fillStyle = "#555";
      ctx.textAlign = "right";
      ctx.fillText(`${(this.offset / 1000).toFixed(1)} s back (double-click: now)`, width - 8, 12);
      ctx.textAlign = "left";
    }
  }

  drawAxis(ctx, left, right, x, width) {
    ctx.strokeStyle = "#999";
    ctx.beginPath();
    ctx.moveTo(GUTTER, AXIS);
    ctx.lineTo(width - 6, AXIS);
    ctx.stroke();
    ctx.fillStyle = "#555";
    ctx.textAlign = "center";
    for (let s = Math.max(0, Math.ceil(left / 1000)); s * 1000 <= right; s++) {
      const px = x(s * 1000);
      ctx.strokeStyle = s % 5 === 0 ? "#bbb" : "#e5e7eb";
      ctx.beginPath();
      ctx.moveTo(px, LANES.user.bar - 4);
      ctx.lineTo(px, AXIS + (s % 5 === 0 ? 5 : 2));
      ctx.stroke();
      if (s % 2 === 0) ctx.fillText(`${s} s`, px, AXIS + 14);
    }
    ctx.textAlign = "left";
  }

  drawSpan(ctx, item, x, now) {
    const at = LANES[item.lane];
    const x0 = Math.max(GUTTER, x(item.start));
    const x1 = Math.max(x0 + 1, x(item.end ?? now));
    ctx.fillStyle = COLORS[item.kind];
    if (item.kind === "paused") {
      // Hatched: the answer is held, not playing.
      ctx.fillRect(x0, at.bar + BAR / 2 - 2, x1 - x0, 4);
      ctx.strokeStyle = COLORS.paused;
      ctx.strokeRect(x0 + 0.5, at.bar + 0.5, x1 - x0 - 1, BAR - 1);
    } else {
      ctx.fillRect(x0, at.bar, x1 - x0, BAR);
    }
    if (item.kind !== "speech" && item.kind !== "audio" && x1 - x0 > 40) {
      ctx.fillStyle = "#fff";
      ctx.fillText(item.kind, x0 + 3, at.bar + BAR / 2);
    }
    if (item.label && item.lane === "assistant") {
      ctx.fillStyle = "#1a7f37";
      const w = ctx.measureText(item.label).width;
      ctx.fillText(item.label, Math.min(x0 + 3, this.canvas.clientWidth - 8 - w), at.bar - 7);
    }
  }

  // A mark: a line across its lane and its label on the first of the lane's two label rows
  // it does not overlap.
  drawMark(ctx, item, x, ends) {
    const at = LANES[item.lane];
    const px = x(item.start);
    if (px < GUTTER) return;
    ctx.strokeStyle = COLORS[item.kind];
    ctx.lineWidth = item.kind === "cut" ? 3 : 1.5;
    ctx.setLineDash(item.kind === "end-of-turn" ? [3, 2] : []);
    ctx.beginPath();
    ctx.moveTo(px, at.bar - 4);
    ctx.lineTo(px, at.bar + BAR + 4);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.lineWidth = 1;
    const text = item.kind === "cut" ? `✂ ${item.label}` : item.label;
    const w = ctx.measureText(text).width;
    // Near the right edge (now) the label goes to the mark's left.
    const from = px + 2 + w > this.canvas.clientWidth - 6 ? px - 2 - w : px + 2;
    const row = ends[item.lane][0] < from ? 0 : 1;
    ends[item.lane][row] = from + w + 6;
    ctx.fillStyle = COLORS[item.kind];
    ctx.fillText(text, from, at.labels[row]);
  }

  // Rule 3.
  relist() {
    this.listed = this.model.version;
    const doc = this.list.ownerDocument;
    this.list.replaceChildren(...this.model.items.map((item) => {
      const li = doc.createElement("li");
      li.textContent = describe(item);
      return li;
    }));
  }
}
