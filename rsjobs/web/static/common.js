// common.js: what both example pages share: the API base, the token box, JSON fetch,
// and small formatting helpers. Loaded before app.js / workflow.js.
"use strict";

const API = new URL("../", window.location.href); // the page is served at <app>/ui/

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

function newKey() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID(); // secure contexts only
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString(undefined, { hour12: false }) + "." + String(ms % 1000).padStart(3, "0");
}
