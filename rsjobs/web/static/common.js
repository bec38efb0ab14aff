// common.js: what the example pages and the dashboard share: the API base, the token box,
// JSON fetch, following an event stream, and small helpers. Loaded before app.js /
// workflow.js / the dashboard's scripts.
"use strict";

const API = new URL("../", window.location.href); // pages are served at <app>/ui/, <app>/dashboard/

const $ = (sel, root = document) => root.querySelector(sel);
const tokenInput = $("#token");
tokenInput.value = sessionStorage.getItem("rsjobs-token") || "";
tokenInput.addEventListener("change", () => sessionStorage.setItem("rsjobs-token", tokenInput.value));

function headers(extra = {}) {
  const h = { ...extra };
  if (tokenInput.value) h.Authorization = `Bearer ${tokenInput.value}`;
  return h;
}

// fetch + JSON; a non-2xx answer throws an Error carrying status, code and detail
async function api(path, options = {}) {
  const res = await fetch(new URL(path, API), { ...options, headers: headers(options.headers) });
  const body = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) {
    const err = new Error(body && body.detail ? body.detail : `HTTP ${res.status}`);
    err.status = res.status;
    err.code = body && body.error ? body.error : "";
    throw err;
  }
  return body;
}

function withToken(url) {
  if (tokenInput.value) url.searchParams.set("access_token", tokenInput.value);
  return url;
}

// An element with properties and a text: never HTML, so user data cannot become markup.
function el(tag, props = {}, text = "") {
  const node = document.createElement(tag);
  Object.assign(node, props);
  if (text) node.textContent = text;
  return node;
}

// How a workflow asset is shown: images (GIF "videos" too) as <img>, real video as <video>.
function mediaOf(asset) {
  const ref = asset.ref.toLowerCase();
  if (/\.(mp4|webm)$/.test(ref)) return "video";
  if (/\.(png|jpe?g|gif|webp)$/.test(ref) || asset.kind === "image") return "img";
  return "link";
}

// Where the page loads asset `a` (version, stage, item, ref) of workflow `wfId` from: the
// app's asset route, or an http(s) reference as it is.
function assetUrl(wfId, a) {
  if (/^https?:\/\//i.test(a.ref)) return new URL(a.ref);
  const path = [a.version, a.stage, a.item].map((p) => encodeURIComponent(String(p))).join("/");
  return withToken(new URL(`workflows/${wfId}/assets/${path}`, API));
}

function newKey() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID(); // secure contexts only
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString(undefined, { hour12: false }) + "." + String(ms % 1000).padStart(3, "0");
}

const POLL_MIN_MS = 1000;
const POLL_MAX_MS = 30000;
const SSE_ERRORS_BEFORE_POLLING = 3;
const HISTORY_PAGE = 500;

// Follow the event stream at `path` (resuming after `view.lastId`) for `view`, which has
// show(entry), done(), poll(), setTransport(text) and the fields es and sseErrors.
// `extra` maps more event names to handlers of their JSON data. After repeated errors, or
// when EventSource gives up, the view falls back to polling (view.poll()).
function followStream(view, path, extra = {}) {
  const url = withToken(new URL(path, API));
  // a fresh EventSource cannot send Last-Event-ID: pass the resume point in the query
  if (view.lastId) url.searchParams.set("last_event_id", view.lastId);
  const es = new EventSource(url);
  view.es = es;
  es.onopen = () => {
    view.sseErrors = 0;
    view.setTransport("live (SSE)");
  };
  es.onmessage = (ev) => view.show(JSON.parse(ev.data));
  for (const [name, handle] of Object.entries(extra)) {
    es.addEventListener(name, (ev) => handle(JSON.parse(ev.data)));
  }
  es.addEventListener("end", () => view.done());
  es.onerror = () => {
    if (view.es !== es) return;
    view.sseErrors += 1;
    // CONNECTING: EventSource retries by itself with Last-Event-ID; CLOSED: it gave up
    if (es.readyState === EventSource.CLOSED || view.sseErrors >= SSE_ERRORS_BEFORE_POLLING) {
      es.close();
      view.es = null;
      view.poll();
    } else {
      view.setTransport("reconnecting…");
    }
  };
}

// The fallback of followStream: read `path`/history (after view.lastId) into view.show,
// then `refresh()` if given, then back to push (view.follow()); on an error, again after
// a doubled delay (POLL_MIN_MS .. POLL_MAX_MS). `what` names the object for a 404.
function pollHistory(view, path, what, refresh = null) {
  clearTimeout(view.pollTimer);
  view.setTransport(`polling (every ${Math.round(view.pollDelay / 1000)} s)`);
  view.pollTimer = setTimeout(async () => {
    try {
      let page;
      do {
        const q = new URLSearchParams({ limit: String(HISTORY_PAGE) });
        if (view.lastId) q.set("after", view.lastId);
        page = await api(`${path}/history?${q}`);
        page.entries.forEach((e) => view.show(e));
      } while (page.entries.length === HISTORY_PAGE);
      if (refresh) await refresh();
      view.pollDelay = POLL_MIN_MS;
      view.sseErrors = 0;
      if (view.finished) return view.done();
      view.follow(); // the server answers again: back to push, from where we are
    } catch (e) {
      if (e.status === 404) {
        view.setTransport(`${what} not found`);
        return;
      }
      view.pollDelay = Math.min(view.pollDelay * 2, POLL_MAX_MS);
      view.poll();
    }
  }, view.pollDelay);
}
