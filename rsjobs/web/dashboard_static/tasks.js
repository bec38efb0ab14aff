// tasks.js: the task lists (GET /tasks with its filters, one page at a time, cursor paging
// both ways) and the bulk actions on the current filter, after a dry run whose count the
// operator confirms.
"use strict";

const PAGE_SIZE = 50;
// the most tasks one bulk action acts on (the oldest first)
const BULK_LIMIT = 100;
const FILTERS = ["state", "queue", "type", "owner", "label", "since", "until"];
// the cursors of the pages before this one, per filter (the API's cursors go forward only)
const pageStacks = new Map();

function toLocalInput(ms) {
  if (!ms) return "";
  const d = new Date(Number(ms));
  const local = new Date(d.getTime() - d.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 19);
}

function fromLocalInput(text) {
  if (!text) return "";
  const ms = new Date(text).getTime();
  return Number.isFinite(ms) ? String(ms) : "";
}

class TaskListView {
  constructor(root, params) {
    this.root = root;
    this.params = params;
    this.filterKey = FILTERS.map((f) => `${f}=${params.getAll(f).join(",")}`).join("&");
    if (!pageStacks.has(this.filterKey)) pageStacks.set(this.filterKey, []);
    this.stack = pageStacks.get(this.filterKey);
    this.cursor = params.get("cursor") || "";
    this.build();
  }

  build() {
    const p = this.params;
    const field = (name, label, input) => h("label", {}, label, input);
    const stateSel = h("select", { name: "state", dataset: { testid: "filter-state" } },
      h("option", { value: "" }, "any"), STATES.map((st) => h("option", { value: st }, st)));
    stateSel.value = p.get("state") || "";
    const text = (name, placeholder) => h("input", { name, value: p.getAll(name).join(" "), placeholder, dataset: { testid: `filter-${name}` } });
    const since = h("input", { name: "since", type: "datetime-local", step: 1, value: toLocalInput(p.get("since")), dataset: { testid: "filter-since" } });
    const until = h("input", { name: "until", type: "datetime-local", step: 1, value: toLocalInput(p.get("until")), dataset: { testid: "filter-until" } });
    const form = h("form", { className: "filters", autocomplete: "off", dataset: { testid: "filters" } },
      field("state", "State", stateSel), field("queue", "Queue", text("queue", "any")),
      field("type", "Type", text("type", "any")), field("owner", "Owner", text("owner", "any")),
      field("label", "Label", text("label", "key=value …")),
      field("since", "Created since", since), field("until", "until", until),
      h("button", { type: "submit", dataset: { testid: "apply" } }, "Apply"),
      h("button", { type: "button", className: "link", dataset: { testid: "clear" }, onclick: () => go("tasks") }, "Clear"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      const data = new FormData(form);
      for (const name of ["state", "queue", "type", "owner"]) {
        const v = String(data.get(name) || "").trim();
        if (v) q.set(name, v);
      }
      for (const lbl of String(data.get("label") || "").split(/\s+/).filter(Boolean)) q.append("label", lbl);
      const s1 = fromLocalInput(String(data.get("since") || ""));
      const s2 = fromLocalInput(String(data.get("until") || ""));
      if (s1) q.set("since", s1);
      if (s2) q.set("until", s2);
      go("tasks", q);
    });
    this.tbody = h("tbody", { dataset: { testid: "task-rows" } });
    this.pager = h("div", { className: "pager" });
    this.bulkBox = h("div", { className: "actions bulk" },
      h("button", { type: "button", dataset: { testid: "bulk-cancel" }, onclick: () => this.bulk("cancel") }, "Cancel matching…"),
      h("button", { type: "button", dataset: { testid: "bulk-retry" }, onclick: () => this.bulk("retry") }, "Retry matching…"),
      h("span", { className: "muted" }, `a dry run counts them first; at most ${BULK_LIMIT} are acted on`));
    this.result = h("p", { className: "action-result", dataset: { testid: "bulk-result" }, role: "status" });
    const title = this.params.get("state") ? `${this.params.get("state")} tasks` : "Tasks";
    // one list per state, the other filters kept
    const tabs = h("nav", { className: "tabs", dataset: { testid: "state-tabs" } }, ["", ...STATES].map((st) => {
      const q = new URLSearchParams(this.params);
      q.delete("cursor");
      if (st) q.set("state", st);
      else q.delete("state");
      const on = (this.params.get("state") || "") === st;
      return link(`#/tasks${q.toString() ? "?" + q : ""}`, st || "all", { className: on ? "on" : "" });
    }));
    this.root.replaceChildren(h("h2", {}, title), tabs, form, this.bulkBox, this.result,
      h("table", { className: "list" },
        h("thead", {}, h("tr", {}, ["task", "type", "queue", "priority", "state", "attempt", "labels", "worker", "created", "updated", "error"].map((c) => h("th", {}, c)))),
        this.tbody),
      this.pager);
  }

  query() {
    const q = new URLSearchParams();
    for (const f of FILTERS) for (const v of this.params.getAll(f)) q.append(f, v);
    q.set("limit", String(PAGE_SIZE));
    if (this.cursor) q.set("cursor", this.cursor);
    return q;
  }

  async render() {
    const page = await api(`tasks?${this.query()}`);
    if (unchanged(this, page)) return;
    this.tbody.replaceChildren(...page.items.map((t) => h("tr", { className: t.state, dataset: { taskId: t.id, state: t.state, testid: "task-row" } },
      h("td", {}, link(`#/task/${t.id}`, t.id.slice(0, 12) + "…", { title: t.id, className: "mono" })),
      h("td", {}, t.type), h("td", {}, t.queue), h("td", { dataset: { testid: "priority" } }, String(t.priority || 0)),
      h("td", {}, stateBadge(t.state)),
      h("td", {}, `${t.attempt}/${t.max_attempts}`),
      h("td", {}, Object.entries(t.labels).map(([k, v]) => h("span", { className: "label" }, `${k}=${v}`))),
      h("td", { className: "mono" }, t.worker || "–"),
      h("td", {}, fmtDate(t.created_at)), h("td", {}, fmtDate(t.updated_at)),
      h("td", { className: "err", title: t.error }, t.error_type ? `${t.error_type}: ${t.error}` : t.error))));
    if (!page.items.length) this.tbody.append(h("tr", {}, h("td", { colSpan: 11, className: "muted" }, page.cursor ? "nothing on this page: look at the next one" : "no task matches")));
    const prev = h("button", { type: "button", disabled: !this.cursor, dataset: { testid: "prev" } }, "← Previous");
    const next = h("button", { type: "button", disabled: !page.cursor, dataset: { testid: "next" } }, "Next →");
    prev.addEventListener("click", () => {
      const before = this.stack.pop() || "";
      this.page(before);
    });
    next.addEventListener("click", () => {
      this.stack.push(this.cursor);
      this.page(page.cursor);
    });
    this.pager.replaceChildren(prev, h("span", { className: "muted" }, `page ${this.stack.length + 1} · ${page.items.length} shown`), next);
  }

  page(cursor) {
    const q = new URLSearchParams(this.params);
    if (cursor) q.set("cursor", cursor);
    else q.delete("cursor");
    go("tasks", q);
  }

  // the bulk routes' filter: one state and queue at most; labels as {key: value}
  bulkFilter() {
    const p = this.params;
    const f = {};
    for (const lbl of p.getAll("label")) {
      const at = lbl.indexOf("=");
      if (at < 1) throw new Error(`label filter ${lbl}: expected key=value`);
      f.labels = { ...(f.labels || {}), [lbl.slice(0, at)]: lbl.slice(at + 1) };
    }
    for (const name of ["state", "queue"]) {
      const v = p.get(name);
      if (v && v.includes(",")) throw new Error(`bulk actions take one ${name}`);
      if (v) f[name] = v;
    }
    for (const name of ["type", "owner"]) if (p.get(name)) f[name] = p.get(name);
    for (const name of ["since", "until"]) if (p.get(name)) f[name] = Number(p.get(name));
    if (!Object.keys(f).length) throw new Error("set a filter first: a bulk action never selects every task");
    return f;
  }

  async bulk(action) {
    this.result.textContent = "";
    this.result.className = "action-result";
    let filter;
    try {
      filter = this.bulkFilter();
    } catch (e) {
      this.result.textContent = e.message;
      this.result.className = "action-result refused";
      return;
    }
    const call = (dryRun) => api(`tasks/bulk/${action}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ filter, dry_run: dryRun, limit: BULK_LIMIT, reason: "from the dashboard" }),
    });
    try {
      const dry = await call(true);
      const shown = (k, v) => k === "labels" ? Object.entries(v).map(([a, b]) => `${a}=${b}`).join(", ")
        : k === "since" || k === "until" ? fmtDate(v) : v;
      const words = Object.entries(filter).map(([k, v]) => k === "labels" ? `label ${shown(k, v)}` : `${k}=${shown(k, v)}`).join(", ");
      if (!dry.matched) {
        this.result.textContent = `dry run: no task matches ${words}; nothing to ${action}`;
        return;
      }
      const n = Math.min(dry.matched, BULK_LIMIT);
      const ok = await confirmAction(
        `${action === "retry" ? "Retry" : "Cancel"} ${n} task${n === 1 ? "" : "s"} matching ${words}?` +
          (dry.matched > BULK_LIMIT ? ` (${dry.matched} match; the oldest ${BULK_LIMIT} are acted on)` : ""),
        dry.ids.slice(0, 10));
      if (!ok) {
        this.result.textContent = `${action}: not done`;
        return;
      }
      const done = await call(false);
      this.result.textContent = `${action}: ${done.changed} of ${done.matched} changed`;
      this.result.className = "action-result ok";
      this.result.dataset.changed = String(done.changed);
      await this.render();
    } catch (e) {
      this.result.textContent = describeError(e, `bulk ${action}`);
      this.result.className = "action-result refused";
    }
  }
}
