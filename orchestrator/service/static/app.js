// The Turntaker page: microphone -> input_audio_buffer.append, output audio -> playback worklet,
// barge-in handled where it is heard (the worklet drops the interrupted response's audio and the
// page reports exactly what was played with playback.ack). In the interruption policy's pause
// mode the worklet holds the answer on `output_audio_buffer.paused` and plays on from the same
// sample on `output_audio_buffer.resumed`; the ACK's cursor stands still meanwhile.
// A lost socket is dialled again and the session resumed: the audio pipeline runs on meanwhile
// and the replayed events play on where the page left off.
//
// This file only builds the page from its parts and wires them; each part owns its state:
//   connection.js   the socket, reconnect and resume (over reconnect.js's pure rules)
//   session-events.js  what each server event does (a handler per type)
//   player.js       the page's side of playback: interrupts, pauses, ACKs (over the worklet)
//   input-position.js  where the input sent stood at a frame of the audio (the ACKs' input_ms)
//   audio.js        AudioContext, microphone and the worklets (capture-, playback-worklet.js)
//   settings.js     what the form asks for and what the server holds
//   view.js         the DOM
//   timeline.js     the turn-taking timeline's canvas (over timeline-model.js), a listener
//   debug.js        window.turntaker: a record built from what the parts emit (emitter.js)

import { AudioPipeline } from "./audio.js";
import { Connection } from "./connection.js";
import { debugRecord } from "./debug.js";
import { Emitter } from "./emitter.js";
import { InputPosition } from "./input-position.js";
import { Player } from "./player.js";
import { dispatch } from "./session-events.js";
import { Settings } from "./settings.js";
import { Timeline } from "./timeline.js";
import { View } from "./view.js";

// Builds the page in `window` (its document and location); no state outside it.
function startPage(window) {
  const { document, location } = window;
  const emitter = new Emitter();
  const view = new View(document);
  const settings = new Settings();

  const connection = new Connection({
    emitter,
    hooks: {
      opened: () => view.opened(),
      live: () => sessionUpdate(),
      newSession: () => {
        newConversation();
        sessionUpdate();
      },
      event: (event) => dispatch(page, event),
      status: (text) => view.status("state", text),
      // The audio stops only here: it plays on through a drop.
      finished: (text) => {
        view.closed(text);
        audio.stop();
        timeline.stop();
      },
    },
  });
  const input = new InputPosition();
  const audio = new AudioPipeline({
    onWorklet: (msg) => player.onWorklet(msg),
    onChunk: (buffer, endFrame) => {
      if (connection.sendAudio(buffer)) input.sent(buffer.byteLength / 2, endFrame);
    },
  });
  const player = new Player({
    worklet: audio, view, emitter, sendAck: (event) => connection.sendAck(event),
    inputAt: (frame) => input.at(frame),
  });
  const page = { settings, player, view };

  function sessionUpdate() {
    connection.send(settings.request(view.form()));
  }

  // A new session on the same page: the old one's conversation, queued audio and ACKs are gone.
  function newConversation() {
    view.newConversation();
    player.reset();
    input.reset();
    audio.renewPlayback();
  }

  async function connect() {
    view.connecting();
    try {
      await audio.start();
    } catch (error) {
      view.closed("error: " + error.name);
      return;
    }
    connection.open(view.url(), view.key());
  }

  emitter.on("wire", ({ dir, event }) => view.log(dir, event));
  const timeline = new Timeline({
    canvas: document.getElementById("timeline"), list: document.getElementById("timeline-list"), emitter,
  });
  window.turntaker = debugRecord({ emitter, connection, settings, view, audio });
  view.init(location, { connect, disconnect: () => connection.disconnect(), apply: sessionUpdate });
}

startPage(window);
