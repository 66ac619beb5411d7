// What the page's parts say happened, for whoever listens: the log panel and the debug record
// (debug.js) are listeners; no part of the page reads another's state through it.
//
// Rules:
// 1. Listeners run synchronously, in the order they subscribed, so that a record taken from
//    the events sees them in the order the page did them.
// 2. A listener that throws is reported and skipped: an observer never breaks the page.
// Node tests it (tests/js/page-parts.test.mjs).

export class Emitter {
  constructor(report = (error) => console.error(error)) {
    this.listeners = new Map(); // type -> [listener]
    this.report = report;
  }

  // Returns a function that unsubscribes.
  on(type, listener) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(listener);
    return () => {
      const list = this.listeners.get(type);
      const at = list.indexOf(listener);
      if (at >= 0) list.splice(at, 1);
    };
  }

  emit(type, detail = {}) {
    for (const listener of [...(this.listeners.get(type) ?? [])]) {
      try {
        listener(detail);
      } catch (error) {
        this.report(error);
      }
    }
  }
}
