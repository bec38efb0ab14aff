// rsjobs workflow page: start or open a workflow, follow it live, act on it.
// No build step, no libraries.
//
// Updates arrive over EventSource (GET workflows/{id}/events): each history entry is a
// default event (its id is the resume point), `status` events carry the status document,
// `end` follows the terminal entry. When the connection drops, EventSource reconnects by
// itself with Last-Event-ID, so the server replays exactly what was missed. If the stream
// keeps failing, the page polls (GET workflows/{id}/history?after=<last id> and
// GET workflows/{id}) with exponential backoff, and goes back to SSE (resuming with
// ?last_event_id=) as soon as a poll succeeds.
"use strict";

const TERMINAL = new Set(["PUBLISHED", "FAILED", "CANCELLED"]);
// the action the page suggests in each status (the server decides what is allowed)
const SUGGESTED = {
  WAITING_CONFIRMATION: "confirm",
  PARTIALLY_FAILED: "retry",
  READY_TO_PUBLISH: "publish",
};

// the last parts of a long reference: enough to tell the files apart
function shortRef(ref) {
  const parts = ref.split("/");
  return parts.length > 3 ? "…/" + parts.slice(-3).join("/") : ref;
}

class WorkflowView {
  constructor(id) {
    this.id = id;
    this.node = $("#workflow");
    this.lastId = null; // the last history id shown: the resume point
    this.shown = new Set();
    this.doc = null;
    this.plan = null;
    this.es = null;
    this.sseErrors = 0;
    this.pollDelay = POLL_MIN_MS;
    this.pollTimer = null;
    this.closed = false;
    this.assetKey = null;
    this.node.hidden = false;
    this.node.dataset.wfId = id;
    delete this.node.dataset.status;
    $(".wf-id", this.node).textContent = id;
    $(".timeline", this.node).replaceChildren();
    $(".assets", this.node).replaceChildren();
    $(".stages", this.node).replaceChildren();
    $("[data-testid=tasks]", this.node).replaceChildren();
    delete $("[data-testid=regen-stage]", this.node).dataset.names;
    this.say("");
  }

  get finished() {
    return this.doc !== null && TERMINAL.has(this.doc.status);
  }

  close() {
    this.closed = true;
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.pollTimer);
  }

  async open(doc = null) {
    try {
      this.plan = await api(`workflows/${this.id}/plan`);
    } catch (e) {
      if (e.status === 404 || e.status === 400 || e.status === 401) {
        this.setTransport("");
        this.say(`cannot open ${this.id}: ${e.message}`, "refused");
        return;
      }
      this.plan = null; // the stage list falls back to the status document's names
    }
    try {
      this.render(doc || (await api(`workflows/${this.id}`)));
    } catch (e) {
      this.say(`cannot read ${this.id}: ${e.message}`, "refused");
    }
    if (!this.closed) this.follow();
  }

  setTransport(text) {
    $(".transport", this.node).textContent = text;
  }

  say(text, kind = "") {
    const p = $(".action-result", this.node);
    p.textContent = text;
    p.className = `action-result ${kind}`;
    p.dataset.kind = kind;
  }

  // -- the status document --------------------------------------------------------------
  render(doc) {
    if (!doc || this.closed) return;
    // an action's answer can overtake a status event in flight: never go back in time
    if (this.doc && doc.updated_at < this.doc.updated_at) return;
    this.doc = doc;
    const n = this.node;
    n.dataset.status = doc.status;
    n.dataset.version = String(doc.version);
    n.dataset.stage = doc.stage;
    const status = $("[data-testid=wf-status]", n);
    status.textContent = doc.status;
    status.className = `status ${doc.status}`;
    $("[data-testid=wf-definition]", n).textContent = doc.definition;
    $("[data-testid=wf-progress]", n).value = doc.progress;
    $("[data-testid=wf-pct]", n).textContent = `${doc.progress}%`;
    $("[data-testid=wf-message]", n).textContent = doc.message;
    $("[data-testid=wf-stage]", n).textContent = `${doc.stage_label} (${doc.stage_index + 1} of ${doc.stages.length})`;
    $("[data-testid=wf-version]", n).textContent = `v${doc.version}`;
    $("[data-testid=wf-running]", n).textContent = String(doc.running_tasks);
    $("[data-testid=wf-pending]", n).textContent = String(doc.pending_tasks);
    $("[data-testid=wf-failed]", n).textContent = String(doc.failed_tasks);
    $("[data-testid=wf-published]", n).textContent = doc.published_version ? `v${doc.published_version}` : "–";
    this.renderStages(doc);
    this.renderTasks(doc);
    this.renderAssets(doc);
    this.renderActions(doc);
  }

  renderStages(doc) {
    const stages = this.plan ? this.plan.stages : doc.stages.map((name) => ({ name, label: name, gate: false, items: [] }));
    const all = doc.status === "READY_TO_PUBLISH" || doc.status === "PUBLISHED";
    const ol = $(".stages", this.node);
    ol.replaceChildren();
    stages.forEach((s, i) => {
      const state = all || i < doc.stage_index ? "done" : i === doc.stage_index ? "current" : "todo";
      const li = el("li", { className: `stage ${state}` });
      li.dataset.stage = s.name;
      li.dataset.state = state;
      li.dataset.gate = s.gate ? "1" : "0";
      li.append(el("span", { className: "stage-name" }, s.label || s.name));
      if (s.items && s.items.length) li.append(el("small", {}, ` ${s.items.length} task${s.items.length > 1 ? "s" : ""}`));
      if (s.gate) {
        const waiting = state === "current" && doc.status === "WAITING_CONFIRMATION";
        const gate = el("span", { className: `gate${waiting ? " waiting" : ""}` }, waiting ? "gate: waiting for you" : "gate");
        gate.title = "the user confirms this stage before the next one starts";
        li.append(gate);
      }
      ol.append(li);
    });
    // the stages a regenerate may name (the server refuses one not reached yet)
    const select = $("[data-testid=regen-stage]", this.node);
    const names = stages.map((s) => s.name).join(" ");
    if (select.dataset.names !== names) {
      // rebuilt only when the stages change, so an open list is not reset by updates
      select.dataset.names = names;
      select.replaceChildren(...stages.map((s) => el("option", { value: s.name }, s.label || s.name)));
      select.value = doc.stage;
    }
  }

  renderTasks(doc) {
    const body = $("[data-testid=tasks]", this.node);
    body.replaceChildren(
      ...doc.tasks.map((t) => {
        const tr = el("tr", { className: t.state });
        tr.dataset.item = t.item;
        tr.dataset.state = t.state;
        tr.append(el("td", {}, t.item), el("td", { className: "state" }, t.state),
          el("td", {}, `${Math.round(t.progress)}%`), el("td", {}, String(t.attempt)), el("td", {}, t.error));
        return tr;
      }),
    );
  }

  assetUrl(a) {
    return assetUrl(this.id, a);
  }

  renderAssets(doc) {
    const key = doc.completed_assets.map((a) => `${a.version}/${a.stage}/${a.item}/${a.task}`).join(" ");
    if (key === this.assetKey) return; // unchanged: keep the loaded images
    this.assetKey = key;
    const box = $(".assets", this.node);
    box.replaceChildren(
      ...doc.completed_assets.map((a) => {
        const fig = el("figure", { className: `asset ${a.kind}` });
        fig.dataset.testid = "asset";
        fig.dataset.stage = a.stage;
        fig.dataset.item = a.item;
        fig.dataset.kind = a.kind;
        const url = this.assetUrl(a);
        const media = mediaOf(a);
        if (media === "img") {
          fig.append(el("img", { src: url.href, alt: `${a.stage} ${a.item}`, decoding: "async" }));
        } else if (media === "video") {
          fig.append(el("video", { src: url.href, controls: true, muted: true, loop: true, autoplay: true }));
        } else {
          fig.append(el("a", { href: url.href, target: "_blank", rel: "noopener" }, a.ref.split("/").pop()));
        }
        const carried = a.carried_from ? ` (made in v${a.carried_from})` : "";
        fig.append(el("figcaption", {}, `${a.stage} / ${a.item} · v${a.version}${carried}`));
        return fig;
      }),
    );
  }

  renderActions(doc) {
    const suggested = SUGGESTED[doc.status];
    this.node.querySelectorAll("[data-action]").forEach((b) => {
      b.disabled = doc.terminal; // otherwise the server decides, and says why it refuses
      b.classList.toggle("primary", b.dataset.action === suggested);
    });
    $("[data-testid=regen-stage]", this.node).disabled = doc.terminal;
  }

  // -- the history -------------------------------------------------------------------
  show(entry) {
    if (this.shown.has(entry.id)) return;
    this.shown.add(entry.id);
    this.lastId = entry.id;
    const li = el("li");
    li.dataset.event = entry.event;
    li.dataset.id = entry.id;
    if (entry.rejected) li.className = "rejected";
    const move = entry.from_status === entry.to_status ? "" : `  ${entry.from_status || "∅"} → ${entry.to_status}`;
    let detail = entry.message;
    if (entry.event === "ASSET" && entry.extra) detail = `${entry.extra.item || ""}: ${shortRef(entry.extra.ref || "")}`;
    li.textContent = `${fmtTime(entry.ts)}  ${entry.rejected ? "refused " : ""}${entry.event}  v${entry.version} ${entry.stage}${move}` +
      (detail ? `  — ${detail}` : "");
    const ol = $(".timeline", this.node);
    const atBottom = ol.scrollTop + ol.clientHeight >= ol.scrollHeight - 4;
    ol.append(li);
    if (atBottom) ol.scrollTop = ol.scrollHeight;
  }

  async done() {
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.pollTimer);
    this.setTransport("");
    try {
      this.render(await api(`workflows/${this.id}`));
    } catch (e) {
      /* the last status event already said how it ended */
    }
  }

  // -- push: server-sent events -------------------------------------------------------
  follow() {
    if (this.closed) return;
    if (this.finished && this.lastId) return this.done();
    followStream(this, `workflows/${this.id}/events`, { status: (doc) => this.render(doc) });
  }

  // -- fallback: polling with exponential backoff ------------------------------------
  poll() {
    if (this.closed) return;
    const path = `workflows/${this.id}`;
    pollHistory(this, path, "workflow", async () => this.render(await api(path)));
  }

  // -- actions ---------------------------------------------------------------------------
  body(action) {
    const d = this.doc;
    if (action === "confirm") return { version: d.version, stage: d.stage };
    if (action === "regenerate") {
      return { stage: $("[data-testid=regen-stage]", this.node).value, version: d.version, reason: "asked for on the workflow page" };
    }
    if (action === "publish") return { version: d.version };
    if (action === "cancel") return { reason: "cancelled on the workflow page" };
    return {};
  }

  async act(action, button) {
    if (!this.doc) return;
    button.disabled = true;
    this.say(`${action}…`, "pending");
    try {
      const r = await api(`workflows/${this.id}/${action}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(this.body(action)),
      });
      this.say(`${action}: ${r.changed ? "done" : "nothing to change"}, now ${r.status}`, "ok");
      this.render(r.workflow);
    } catch (e) {
      // a refusal: the status code, the error code and the server's reason, as they are
      const code = e.code ? ` ${e.code}` : "";
      const reason = e.message.startsWith(`${action} refused: `) ? e.message.slice(action.length + 10) : e.message;
      this.say(`${action} refused (HTTP ${e.status || "error"}${code}): ${reason}`, "refused");
    } finally {
      button.disabled = this.doc ? this.doc.terminal : false;
    }
  }
}

let view = null;

function openWorkflow(id, doc = null) {
  if (view) view.close();
  view = new WorkflowView(id);
  $("#wf-id").value = id;
  const here = new URL(window.location.href);
  here.searchParams.set("id", id);
  window.history.replaceState(null, "", here);
  view.open(doc);
}

document.querySelectorAll("#workflow [data-action]").forEach((b) =>
  b.addEventListener("click", () => view && view.act(b.dataset.action, b)),
);

$("#start-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const errorEl = $("#form-error");
  errorEl.textContent = "";
  let input;
  try {
    const text = $("#wf-input").value.trim();
    input = text ? JSON.parse(text) : null;
  } catch (e) {
    errorEl.textContent = `input is not valid JSON: ${e.message}`;
    return;
  }
  try {
    const r = await api("workflows", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": newKey() },
      body: JSON.stringify({ definition: $("#wf-definition").value.trim(), input }),
    });
    openWorkflow(r.id, r.workflow);
  } catch (e) {
    errorEl.textContent = `start refused (HTTP ${e.status || "error"}${e.code ? " " + e.code : ""}): ${e.message}`;
  }
});

$("#open-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = $("#wf-id").value.trim().toLowerCase();
  const errorEl = $("#form-error");
  errorEl.textContent = "";
  if (!/^[0-9a-f]{32}$/.test(id)) {
    errorEl.textContent = "a workflow id is 32 lowercase hexadecimal characters";
    return;
  }
  openWorkflow(id);
});

const query = new URLSearchParams(window.location.search);
// embedded in the dashboard: the workflow only, without the page's own header and forms
if (query.get("embed") === "1") document.body.classList.add("embedded");
const initial = query.get("id");
if (initial) openWorkflow(initial.trim().toLowerCase());
