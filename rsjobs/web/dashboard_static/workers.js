// workers.js: the workers registry (GET /workers) and the dead letters (GET /deadletters,
// with their requeue).
"use strict";

class WorkersView {
  constructor(root) {
    this.root = root;
  }

  async render() {
    const { workers } = await api("workers");
    if (unchanged(this, workers)) return;
    const rows = workers.map((w) => h("tr", { className: w.status, dataset: { worker: w.name, status: w.status, testid: "worker-row" } },
      h("td", { className: "mono" }, w.name), h("td", {}, h("span", { className: `badge ${w.status}` }, w.status)),
      h("td", {}, `${w.host}:${w.pid}`), h("td", {}, w.queues.join(", ")), h("td", {}, String(w.concurrency)),
      h("td", {}, w.running.map((id) => link(`#/task/${id}`, id.slice(0, 8) + "…", { title: id, className: "mono" }))),
      h("td", {}, String(w.processed)), h("td", {}, fmtDuration(w.silent_ms)), h("td", {}, w.dead_since ? fmtDate(w.dead_since) : "–")));
    this.root.replaceChildren(h("h2", {}, "Workers"),
      h("table", { className: "list" },
        h("thead", {}, h("tr", {}, ["worker", "status", "host:pid", "queues", "slots", "running", "processed", "silent for", "dead since"].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colSpan: 9, className: "muted" }, "no worker registered")))));
  }
}

class DeadLettersView {
  constructor(root, params) {
    this.root = root;
    this.params = params;
  }

  async render() {
    const q = new URLSearchParams({ limit: "50" });
    if (this.params.get("cursor")) q.set("cursor", this.params.get("cursor"));
    const page = await api(`deadletters?${q}`);
    if (unchanged(this, page)) return;
    const rows = page.items.map((d) => {
      const b = h("button", { type: "button", disabled: Boolean(d.requeued_as) || !d.exists, dataset: { testid: "requeue" } }, "Requeue");
      const said = h("span", {});
      b.addEventListener("click", async () => {
        b.disabled = true;
        try {
          const r = await api(`deadletters/${d.task_id}/requeue`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
          said.replaceChildren("as ", link(`#/task/${r.requeued_as}`, r.requeued_as.slice(0, 12) + "…", { dataset: { testid: "new-task" } }));
        } catch (e) {
          said.textContent = describeError(e, "requeue refused");
          b.disabled = false;
        }
      });
      return h("tr", { dataset: { taskId: d.task_id, testid: "deadletter-row" } },
        h("td", {}, link(`#/task/${d.task_id}`, d.task_id.slice(0, 12) + "…", { title: d.task_id, className: "mono" })),
        h("td", {}, d.type), h("td", {}, d.queue), h("td", {}, d.reason), h("td", { className: "mono" }, d.worker),
        h("td", {}, String(d.deliveries)), h("td", {}, fmtDate(d.ts)),
        h("td", {}, d.requeued_as ? link(`#/task/${d.requeued_as}`, d.requeued_as.slice(0, 12) + "…", { dataset: { testid: "new-task" } }) : b, said));
    });
    const next = h("button", { type: "button", disabled: !page.cursor }, "Next →");
    next.addEventListener("click", () => go("deadletters", new URLSearchParams({ cursor: page.cursor })));
    this.root.replaceChildren(h("h2", {}, "Dead letters"),
      h("table", { className: "list" },
        h("thead", {}, h("tr", {}, ["task", "type", "queue", "reason", "worker", "deliveries", "when", "requeue"].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colSpan: 8, className: "muted" }, "no dead letter")))),
      h("div", { className: "pager" }, this.params.get("cursor") ? link("#/deadletters", "← first page") : null, next));
  }
}
