// core.js: what the dashboard's views share: building elements (text only, never HTML),
// times and durations, errors shown to the operator, optional routes, the confirmation
// dialog and the namespace's live events (GET /events, debounced for the views).
"use strict";

// the task states in the order a task passes through them: set from the served state
// machine (dashboard/fsm.json, the table the scripts enforce) before the first view
// renders (loadStates in main.js)
let STATES = [];
// a view refreshes at most this often while events arrive
const REFRESH_MS = 400;
// without GET /events, lists and the overview are read again this often
const FALLBACK_POLL_MS = 3000;
// with it, this often too: a task's first entry (ENQUEUE) is no event of the stream, so a
// new task shows up by this read (or by its next event)
const NEW_TASKS_POLL_MS = 5000;

// h("td", {className: "x", dataset: {id}}, child, "text", ...): text children become text
// nodes, so a value from the API is always shown as text.
function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  const { dataset, ...rest } = props;
  Object.assign(node, rest);
  if (dataset) Object.assign(node.dataset, dataset);
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// replaceChildren that skips null, undefined and false (which it would show as text)
function put(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

// Whether `data` is what `view` last drew (then it is not drawn again: a live refresh
// must not replace what the operator is about to click).
function unchanged(view, data) {
  const key = JSON.stringify(data);
  if (view.drawn === key) return true;
  view.drawn = key;
  return false;
}

function link(href, text, props = {}) {
  return h("a", { href, ...props }, text);
}

function stateBadge(state) {
  return h("span", { className: `badge ${state}`, dataset: { state } }, state);
}

function fmtDate(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  return `${d.toISOString().slice(0, 10)} ${fmtTime(ms)}`;
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function pretty(value) {
  if (value === null || value === undefined) return "null";
  return JSON.stringify(value, null, 2);
}

// -- errors -------------------------------------------------------------------------------

const banner = $("#banner");

// What went wrong, in words an operator can act on; a refused token says so plainly.
function describeError(e, doing = "") {
  const what = doing ? `${doing}: ` : "";
  if (e.status === 401) return `${what}the token was refused (HTTP 401: ${e.message}). Type an admin token above.`;
  if (e.status === 403) return `${what}this needs an admin token (HTTP 403: ${e.message}).`;
  if (e.status) return `${what}HTTP ${e.status}${e.code ? " " + e.code : ""}: ${e.message}`;
  return `${what}the server does not answer (${e.message}).`;
}

function showBanner(text, kind = "error") {
  banner.textContent = text;
  banner.className = `banner ${kind}`;
  banner.dataset.kind = kind;
  banner.hidden = !text;
}

function report(e, doing = "") {
  showBanner(describeError(e, doing));
}

// A route another release of the server may not have: null when the router answers that
// no such route (or method) exists; a 404 of the route itself (an unknown queue) is thrown.
async function optional(path, options = {}) {
  try {
    return await api(path, options);
  } catch (e) {
    if ((e.status === 404 && e.code === "not_found") || e.status === 405) return null;
    throw e;
  }
}

function notAvailable(what) {
  return h("p", { className: "muted not-available", dataset: { testid: "not-available" } },
    `${what}: not available on this server.`);
}

// -- the confirmation dialog ------------------------------------------------------------

const dialog = $("#confirm");

// Ask before acting: resolves true when the operator confirms. `sample` lists a few of the
// things the action would touch.
function confirmAction(question, sample = []) {
  $("[data-testid=confirm-text]", dialog).textContent = question;
  $("[data-testid=confirm-sample]", dialog).replaceChildren(...sample.map((s) => h("li", {}, h("code", {}, s))));
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

// -- live: the namespace's events -------------------------------------------------------

// One EventSource on GET /events for the whole page; views subscribe with a callback that
// the hub calls (at most every REFRESH_MS) after events arrived, and every
// NEW_TASKS_POLL_MS for the new tasks the stream does not announce. Without the route, or
// when it keeps failing, the hub calls them every FALLBACK_POLL_MS instead.
class LiveHub {
  constructor() {
    this.subs = new Set();
    this.es = null;
    this.timer = null;
    this.poller = null;
    this.pending = false;
    this.mode = "";
    this.errors = 0;
  }

  subscribe(fn) {
    this.subs.add(fn);
    this.ensure();
    return () => this.subs.delete(fn);
  }

  setMode(text) {
    this.mode = text;
    const live = $("#live");
    live.textContent = text;
    live.dataset.mode = text.split(" ")[0];
  }

  // an event arrived: refresh the views once the burst has passed
  poke() {
    if (this.timer) {
      this.pending = true;
      return;
    }
    this.fire();
    this.timer = setTimeout(() => {
      this.timer = null;
      if (this.pending) {
        this.pending = false;
        this.poke();
      }
    }, REFRESH_MS);
  }

  fire() {
    for (const fn of [...this.subs]) {
      try {
        fn();
      } catch (e) {
        console.error(e);
      }
    }
  }

  async ensure() {
    if (this.es || this.poller || this.probing) return;
    this.probing = true;
    try {
      const ok = await this.probe();
      if (ok) this.open();
      else this.poll("no /events on this server");
    } finally {
      this.probing = false;
    }
  }

  // whether GET /events exists (a fetch answers the status EventSource hides)
  async probe() {
    const ctl = new AbortController();
    try {
      const res = await fetch(withToken(new URL("events", API)), { signal: ctl.signal, headers: headers() });
      ctl.abort();
      return res.ok;
    } catch (e) {
      return false;
    }
  }

  open() {
    const es = new EventSource(withToken(new URL("events", API)));
    this.es = es;
    clearInterval(this.slow);
    this.slow = setInterval(() => this.poke(), NEW_TASKS_POLL_MS);
    es.onopen = () => {
      this.errors = 0;
      this.setMode("live (SSE)");
    };
    es.onmessage = () => this.poke();
    // entries were trimmed before this page could read them: read everything again
    es.addEventListener("gap", () => this.poke());
    es.onerror = () => {
      if (this.es !== es) return;
      this.errors += 1;
      if (es.readyState === EventSource.CLOSED || this.errors >= SSE_ERRORS_BEFORE_POLLING) {
        es.close();
        this.es = null;
        clearInterval(this.slow);
        this.poll("the event stream failed");
      } else {
        this.setMode("reconnecting…");
      }
    };
  }

  poll(why) {
    this.setMode(`polling every ${FALLBACK_POLL_MS / 1000} s (${why})`);
    this.poller = setInterval(() => this.fire(), FALLBACK_POLL_MS);
  }

  // the token changed: start over
  restart() {
    if (this.es) this.es.close();
    this.es = null;
    clearInterval(this.slow);
    clearInterval(this.poller);
    this.poller = null;
    if (this.subs.size) this.ensure();
  }
}

const live = new LiveHub();
