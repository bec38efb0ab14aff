// rsjobs example frontend: submit, follow over SSE, cancel. No build step, no libraries.
//
// Updates arrive over EventSource (GET tasks/{id}/events). When the connection drops,
// EventSource reconnects by itself and sends Last-Event-ID, so the server replays exactly
// what was missed. If the stream keeps failing, the page falls back to polling
// (GET tasks/{id}/history?after=<last id>) with exponential backoff, and goes back to SSE
// (resuming with ?last_event_id=) as soon as a poll succeeds.
"use strict";

const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]);

class TaskView {
  constructor(id) {
    this.id = id;
    this.lastId = null; // the last history id shown: the resume point
    this.shown = new Set();
    this.state = "";
    this.es = null;
    this.sseErrors = 0;
    this.pollDelay = POLL_MIN_MS;
    this.pollTimer = null;
    const node = $("#task-card").content.firstElementChild.cloneNode(true);
    node.dataset.taskId = id;
    $(".task-id", node).textContent = id;
    $(".cancel", node).addEventListener("click", () => this.cancel());
    $("#tasks").prepend(node);
    this.node = node;
  }

  get finished() {
    return TERMINAL.has(this.state);
  }

  setState(state) {
    if (!state) return;
    this.state = state;
    const el = $(".state", this.node);
    el.textContent = state;
    el.className = `state ${state}`;
    this.node.dataset.state = state;
    $(".cancel", this.node).disabled = this.finished;
  }

  setTransport(text) {
    $(".transport", this.node).textContent = text;
  }

  // One history entry (same shape from SSE, GET history and GET task's `recent`).
  show(entry) {
    if (this.shown.has(entry.id)) return;
    this.shown.add(entry.id);
    this.lastId = entry.id;
    const li = document.createElement("li");
    li.dataset.event = entry.event;
    li.dataset.id = entry.id;
    if (entry.rejected) li.className = "rejected";
    const arrow = entry.from_state === entry.to_state ? entry.to_state : `${entry.from_state || "∅"} → ${entry.to_state}`;
    li.textContent = `${fmtTime(entry.ts)}  ${entry.rejected ? "refused " : ""}${entry.event}  ${arrow}` +
      (entry.message ? `  — ${entry.message}` : "");
    $(".timeline", this.node).append(li);
    if (entry.event === "PROGRESS" && entry.extra && entry.extra.p !== undefined) {
      $("progress", this.node).value = Number(entry.extra.p);
      $(".progress-msg", this.node).textContent = entry.message || "";
    }
    if (!entry.rejected) this.setState(entry.to_state);
    if (entry.to_state === "SUCCEEDED" && !entry.rejected) $("progress", this.node).value = 100;
  }

  async showOutcome() {
    try {
      const t = await api(`tasks/${this.id}`);
      this.setState(t.state);
      const out = $(".outcome", this.node);
      if (t.state === "SUCCEEDED") out.textContent = "result: " + JSON.stringify(t.result);
      else if (t.error) out.textContent = `${t.error_type ? t.error_type + ": " : ""}${t.error}`;
    } catch (e) {
      /* the timeline already says how it ended */
    }
  }

  done() {
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.pollTimer);
    this.setTransport("");
    this.showOutcome();
  }

  // -- push: server-sent events -------------------------------------------------------
  follow() {
    if (this.finished) return this.done();
    followStream(this, `tasks/${this.id}/events`);
  }

  // -- fallback: polling with exponential backoff ------------------------------------
  poll() {
    pollHistory(this, `tasks/${this.id}`, "task");
  }

  async cancel() {
    $(".cancel", this.node).disabled = true;
    try {
      const r = await api(`tasks/${this.id}/cancel`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ reason: "cancelled from the example page" }),
      });
      this.setState(r.state);
    } catch (e) {
      $(".outcome", this.node).textContent = `cancel failed: ${e.message}`;
      $(".cancel", this.node).disabled = this.finished;
    }
  }
}

$("#submit-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const errorEl = $("#form-error");
  errorEl.textContent = "";
  let payload;
  try {
    const text = $("#task-payload").value.trim();
    payload = text ? JSON.parse(text) : null;
  } catch (e) {
    errorEl.textContent = `payload is not valid JSON: ${e.message}`;
    return;
  }
  try {
    const r = await api("tasks", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": newKey() },
      body: JSON.stringify({ type: $("#task-type").value, payload }),
    });
    const view = new TaskView(r.id);
    view.setState(r.state);
    view.follow();
  } catch (e) {
    errorEl.textContent = `submit failed: ${e.message}`;
  }
});
