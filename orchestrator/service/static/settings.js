// The session's settings on the page: what the form asks for (session.update) and what the
// server holds (session.created / session.updated). Pure: the form arrives as plain values
// (view.js reads them), so node tests it (tests/js/settings.test.mjs).
//
// Rules:
// 1. The page acts on the interruption mode the server holds, not on the one it asked for: a
//    server that does not know the policy echoes none and interrupts at once, and so does the
//    page ("immediate").
// 2. Speech interrupts a response at once only when the server holds interrupt_response (not
//    false) and the immediate mode; in pause mode the server says what to do.
// 3. server_vad takes the silence knobs, semantic_vad its eagerness: the server refuses the
//    other type's knobs by name rather than ignore them, so only the chosen type's go out.
// 4. The pause knobs go out only in pause mode.
// 5. Echo cancellation (the server's extension) and noise reduction go out in every update,
//    null when off, so that unticking them turns them off on the server too.
// 6. The voice goes out as audio.output.voice: the cascade's names (joe, Piper's CC0 voice,
//    its default; flite's slt, kal16, awb, rms); the server gives any other name its default.

export class Settings {
  constructor() {
    this.interruptResponse = true;
    this.interruption = "immediate"; // the mode the server holds
  }

  // Rule 2.
  interruptsAtOnce() {
    return this.interruptResponse && this.interruption === "immediate";
  }

  // The session.update the form asks for. Until the server answers, the page goes by the
  // form's interrupt_response (the box the user just set).
  request(form) {
    this.interruptResponse = form.interrupt;
    return sessionUpdate(form);
  }

  // Takes what the server holds (rule 1); returns it for the form to show.
  hold(session) {
    const held = heldSettings(session);
    this.interruptResponse = held.interruptResponse;
    this.interruption = held.interruption;
    return held;
  }
}

// What a session.created / session.updated says: {turnDetection (or undefined),
// interruptResponse, interruption, policy (or undefined)}.
export function heldSettings(session) {
  const td = session && session.audio && session.audio.input.turn_detection;
  const policy = td && td.interruption;
  const input = (session && session.audio && session.audio.input) || {};
  return {
    turnDetection: td,
    echo: Boolean(input.echo_cancellation),
    voice: (session && session.audio && session.audio.output && session.audio.output.voice) || "",
    noise: (input.noise_reduction && input.noise_reduction.type) || "",
    interruptResponse: !td || td.interrupt_response !== false,
    interruption: (policy && policy.mode) || "immediate",
    policy,
  };
}

// The session.update for the form's values: {interrupt (bool), interruption (mode), minSpeech,
// resumeAfter, turnType, eagerness, threshold, silence (the inputs' strings), preemptive (bool),
// echo (bool), noise ("" off, "near_field", "far_field"), voice (a voice name)}.
export function sessionUpdate(form) {
  const interruption = { mode: form.interruption };
  if (form.interruption === "pause") {
    interruption.min_speech_ms = Number(form.minSpeech);
    interruption.resume_after_ms = Number(form.resumeAfter);
  }
  return {
    type: "session.update",
    session: {
      type: "realtime",
      output_modalities: ["audio"],
      audio: {
        input: {
          transcription: { model: "whisper" },
          turn_detection: turnDetection(form, interruption),
          // Rule 5.
          echo_cancellation: form.echo ? { type: "server" } : null,
          noise_reduction: form.noise ? { type: form.noise } : null,
        },
        // Rule 6.
        output: { voice: form.voice },
      },
    },
  };
}

// Rule 3.
export function turnDetection(form, interruption) {
  const common = {
    type: form.turnType,
    interrupt_response: form.interrupt,
    interruption,
    preemptive_response: form.preemptive,
  };
  if (form.turnType === "semantic_vad") return { ...common, eagerness: form.eagerness };
  return {
    ...common,
    threshold: Number(form.threshold),
    silence_duration_ms: Number(form.silence),
  };
}
