// task.js: one task: its fields, payload, result or error with the traceback of every
// failed attempt (newest first), timings, its history as a timeline, the state machine with
// its path, and the actions its state allows. Live over GET /tasks/{id}/events (resumable;
// polling the history when the stream keeps failing, as the example pages do).
"use strict";

// the history events whose entry may carry the traceback of a failed attempt
const FAILING = new Set(["FAIL", "TIMEOUT", "RECLAIM", "DEADLETTER", "EXPIRE"]);

class TaskDetailView {
  constructor(root, id) {
    this.root = root;
    this.id = id;
    this.entries = [];
    this.shown = new Set();
    this.lastId = null;
    this.es = null;
    this.sseErrors = 0;
    this.pollDelay = POLL_MIN_MS;
    this.pollTimer = null;
    this.closed = false;
    this.task = null;
    this.graph = null;
    this.refreshTimer = null;
  }

  get finished() {
    return this.task !== null && this.task.terminal;
  }

  close() {
    this.closed = true;
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.pollTimer);
    clearTimeout(this.refreshTimer);
  }

  async render() {
    this.graph = await loadFsm();
    this.task = await api(`tasks/${this.id}`);
    this.layout();
    this.fill();
    this.follow();
  }

  layout() {
    const box = (name, ...children) => h("section", { className: `box ${name}`, dataset: { testid: name } }, ...children);
    this.head = h("header", { className: "task-head" });
    this.links = h("div", { className: "task-links", dataset: { testid: "task-links" } });
    this.actions = h("div", { className: "actions", dataset: { testid: "task-actions" } });
    this.said = h("p", { className: "action-result", dataset: { testid: "action-result" }, role: "status" });
    this.facts = h("dl", { className: "facts wide", dataset: { testid: "facts" } });
    this.payload = h("pre", { className: "json", dataset: { testid: "payload" } });
    this.outcome = h("div", { dataset: { testid: "outcome" } });
    this.attempts = h("div", { dataset: { testid: "attempts" } });
    this.graphBox = h("div", { className: "graph", dataset: { testid: "graph" } });
    this.timeline = h("ol", { className: "timeline", dataset: { testid: "timeline" } });
    this.transport = h("span", { className: "transport", dataset: { testid: "transport" } });
    this.root.replaceChildren(
      h("p", {}, link("#/tasks", "← tasks")),
      this.head, this.links, this.actions, this.said, this.facts,
      h("div", { className: "two" },
        box("payload-box", h("h3", {}, "Payload"), this.payload),
        box("outcome-box", h("h3", {}, "Outcome"), this.outcome)),
      box("attempts-box", h("h3", {}, "Failed attempts (newest first)"), this.attempts),
      box("graph-box", h("h3", {}, "State machine"), h("p", { className: "muted" },
        "this task's path in blue, its state outlined; a red count marks calls the state machine refused (late results, stale leases…)"), this.graphBox),
      box("history-box", h("h3", {}, "History "), this.transport, this.timeline));
    this.root.dataset.taskId = this.id;
  }

  fill() {
    const t = this.task;
    this.root.dataset.state = t.state;
    put(this.head,
      h("h2", {}, h("code", { dataset: { testid: "task-id" } }, t.id)),
      stateBadge(t.state), t.queue_paused ? h("span", { className: "badge PAUSED", dataset: { testid: "queue-paused" } }, `queue ${t.queue} is paused`) : null,
      t.retry_of ? h("span", {}, "started over from ", link(`#/task/${t.retry_of}`, t.retry_of.slice(0, 12) + "…", { dataset: { testid: "retry-of" } })) : null,
      t.retried_as ? h("span", {}, "started over as ", link(`#/task/${t.retried_as}`, t.retried_as.slice(0, 12) + "…", { dataset: { testid: "retried-as" } })) : null);
    // a successor's predecessors (each with the state its end was counted in) and the
    // tasks that wait for this one
    const short = (id, testid, state) => h("span", { className: "task-link", dataset: { testid, state: state || "" } },
      link(`#/task/${id}`, id.slice(0, 12) + "…"), state !== undefined ? ` ${state || "awaited"}` : "");
    put(this.links,
      t.after && t.after.length ? h("p", { dataset: { testid: "after" } }, `after (${t.after_policy}): `,
        ...t.after.map((p) => short(p, "predecessor", t.predecessor_states[p] || ""))) : null,
      t.successors && t.successors.length ? h("p", { dataset: { testid: "successors" } }, "successors: ",
        ...t.successors.map((s) => short(s, "successor"))) : null);
    const run = t.started_at && t.finished_at ? t.finished_at - t.started_at : t.started_at ? Date.now() - t.started_at : null;
    const facts = [
      ["type", t.type], ["queue", t.queue], ["priority", String(t.priority || 0)], ["owner", t.owner || "–"],
      ["attempt", `${t.attempt} of ${t.max_attempts}`], ["failures", String(t.failures)], ["worker", t.worker || "–"],
      ["progress", `${Math.round(t.progress)}%${t.progress_msg ? " " + t.progress_msg : ""}`],
      ["labels", Object.entries(t.labels).map(([k, v]) => `${k}=${v}`).join(" ") || "–"],
      ["created", fmtDate(t.created_at)], ["started", fmtDate(t.started_at)], ["finished", fmtDate(t.finished_at)],
      ["updated", fmtDate(t.updated_at)], ["waited", t.started_at ? fmtDuration(t.started_at - t.created_at) : "–"],
      ["ran", run === null ? "–" : fmtDuration(run)], ["due", fmtDate(t.due_at)], ["expires", fmtDate(t.expires_at)],
      ["timeout", t.timeout_ms ? fmtDuration(t.timeout_ms) : "none"],
    ];
    this.facts.replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { dataset: { fact: k } }, v)]));
    this.payload.textContent = pretty(t.payload);
    const out = [];
    if (t.state === "SUCCEEDED") out.push(h("pre", { className: "json", dataset: { testid: "result" } }, pretty(t.result)));
    if (t.error) out.push(h("p", { className: "error", dataset: { testid: "error" } }, `${t.error_type ? t.error_type + ": " : ""}${t.error}`));
    if (!out.length) out.push(h("p", { className: "muted" }, t.terminal ? "no result" : "not finished yet"));
    this.outcome.replaceChildren(...out);
    this.renderAttempts();
    this.renderActions();
    this.graphBox.replaceChildren(renderFsm(this.graph, this.entries, t.state));
  }

  // every failed attempt's error and traceback, from the history (the task keeps the last)
  renderAttempts() {
    const failed = this.entries.filter((e) => !e.rejected && FAILING.has(e.event)).reverse();
    const items = failed.map((e) => h("details", { className: "attempt", open: true, dataset: { testid: "failed-attempt", attempt: String(e.attempt), event: e.event } },
      h("summary", {}, `attempt ${e.attempt} · ${e.event} · ${fmtDate(e.ts)}${e.message ? " — " + e.message : ""}`),
      e.extra && e.extra.traceback ? h("pre", { className: "traceback", dataset: { testid: "traceback" } }, e.extra.traceback) : h("p", { className: "muted" }, "no traceback recorded")));
    if (!items.length && this.task.traceback) {
      items.push(h("details", { className: "attempt", open: true, dataset: { testid: "failed-attempt" } },
        h("summary", {}, `last failed attempt`), h("pre", { className: "traceback", dataset: { testid: "traceback" } }, this.task.traceback)));
    }
    this.attempts.replaceChildren(...(items.length ? items : [h("p", { className: "muted" }, "none")]));
  }

  renderActions() {
    const t = this.task;
    const allowed = eventsFrom(this.graph, t.state);
    const restart = this.graph.restart[t.state];
    const dead = this.entries.some((e) => e.event === "DEADLETTER" && !e.rejected);
    // a successor cancelled while it waited was never released: it is not started over
    const states = t.predecessor_states || {};
    const unreleased = (t.after || []).some((p) => !states[p] || (states[p] !== "SUCCEEDED" && t.after_policy !== "always"));
    const button = (name, label, enabled, cls = "") => {
      const b = h("button", { type: "button", className: cls, disabled: !enabled, dataset: { testid: `action-${name}` } }, label);
      b.addEventListener("click", () => this.act(name, b));
      return b;
    };
    put(this.actions,
      button("cancel", "Cancel", allowed.has("CANCEL"), "danger"),
      button("pause", "Pause", allowed.has("PAUSE")),
      button("resume", "Resume", allowed.has("RESUME")),
      button(restart === "REPLAY" ? "replay" : "retry", restart === "REPLAY" ? "Replay" : "Retry", Boolean(restart) && !t.retried_as && !unreleased, "primary"),
      dead ? button("requeue", "Requeue dead letter", !t.retried_as) : null);
  }

  async act(name, button) {
    button.disabled = true;
    this.said.className = "action-result";
    this.said.replaceChildren();
    const path = name === "requeue" ? `deadletters/${this.id}/requeue` : `tasks/${this.id}/${name}`;
    try {
      const r = await api(path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ reason: "from the dashboard" }),
      });
      const fresh = r.new_id || r.requeued_as;
      if (fresh) {
        this.said.append(`${name}: new task `, link(`#/task/${fresh}`, fresh, { dataset: { testid: "new-task" } }));
      } else {
        this.said.append(`${name}: ${r.changed === false ? "nothing to change, " : ""}now ${r.state}`);
      }
      this.said.className = "action-result ok";
      await this.refresh();
    } catch (e) {
      this.said.textContent = describeError(e, `${name} refused`);
      this.said.className = "action-result refused";
      button.disabled = false;
    }
  }

  async refresh() {
    if (this.closed) return;
    try {
      this.task = await api(`tasks/${this.id}`);
      this.fill();
    } catch (e) {
      report(e, "reading the task");
    }
  }

  // at most one read of the task per REFRESH_MS while entries stream in
  refreshSoon() {
    if (this.refreshTimer) return;
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = null;
      this.refresh();
    }, REFRESH_MS);
  }

  // -- the history (from the stream, or the polling fallback) ------------------------
  show(entry) {
    if (this.closed || this.shown.has(entry.id)) return;
    this.shown.add(entry.id);
    this.lastId = entry.id;
    this.entries.push(entry);
    const move = entry.from_state === entry.to_state ? entry.to_state : `${entry.from_state || "∅"} → ${entry.to_state}`;
    const li = h("li", { className: entry.rejected ? "rejected" : "", dataset: { id: entry.id, event: entry.event, rejected: entry.rejected ? "1" : "0" } },
      h("time", {}, fmtTime(entry.ts)), " ",
      entry.rejected ? h("strong", { className: "refused" }, `refused${entry.repeats ? " ×" + (1 + entry.repeats) : ""} `) : null,
      h("b", {}, entry.event), ` ${move}`, h("span", { className: "muted" }, ` · attempt ${entry.attempt} · ${entry.source}`),
      entry.message ? ` — ${entry.message}` : "");
    this.timeline.append(li);
    if (!entry.rejected && entry.to_state) {
      this.root.dataset.state = entry.to_state;
    }
    this.refreshSoon();
  }

  setTransport(text) {
    this.transport.textContent = text;
  }

  // The stream ends after the terminal entry; what a finished task's history gets later
  // (refused late results, stale leases) is read from GET /tasks/{id}/history.
  done() {
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.pollTimer);
    this.setTransport("(finished)");
    this.ended = true;
    this.readTail();
  }

  async readTail() {
    if (this.closed || this.reading) return;
    this.reading = true;
    try {
      let page;
      do {
        const q = new URLSearchParams({ limit: String(HISTORY_PAGE) });
        if (this.lastId) q.set("after", this.lastId);
        page = await api(`tasks/${this.id}/history?${q}`);
        page.entries.forEach((e) => this.show(e));
      } while (page.entries.length === HISTORY_PAGE);
      await this.refresh();
    } catch (e) {
      report(e, "reading the history");
    } finally {
      this.reading = false;
    }
  }

  // the namespace's events (GET /events, or its polling stand-in): only a finished task
  // needs them, its own stream having ended
  onLive() {
    if (this.ended) this.readTail();
  }

  follow() {
    if (this.closed) return;
    followStream(this, `tasks/${this.id}/events`);
  }

  poll() {
    if (this.closed) return;
    pollHistory(this, `tasks/${this.id}`, "task", () => this.refresh());
  }
}
