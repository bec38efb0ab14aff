// overview.js: per queue, the tasks in each state, the backlog and its oldest task's age,
// throughput and failure rate over the last minutes (GET /queues/{q}/series), the workers,
// and a queue's pause / resume.
"use strict";

const SERIES_MINUTES = 60;

// An inline SVG sparkline of `values` (oldest first); `title` says what it shows.
function sparkline(values, { width = 180, height = 34, max = null, title = "", cls = "" } = {}) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", `spark ${cls}`);
  svg.dataset.points = String(values.length);
  const top = max !== null ? max : Math.max(1, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / top) * (height - 4)).toFixed(1)}`);
  if (pts.length) {
    const area = s("path", { d: `M0,${height} L${pts.join(" L")} L${((values.length - 1) * step).toFixed(1)},${height} z`, class: "area" });
    svg.append(area, s("polyline", { points: pts.join(" "), class: "line" }));
  }
  svg.append(s("title", {}, title));
  return svg;
}

function seriesCharts(series) {
  const pts = series.points || [];
  const done = pts.map((p) => p.succeeded + p.failed + p.timed_out + p.cancelled);
  const bad = pts.map((p) => p.failed + p.timed_out);
  const rate = pts.map((p, i) => (done[i] ? (100 * bad[i]) / done[i] : 0));
  const total = done.reduce((a, b) => a + b, 0);
  const failed = bad.reduce((a, b) => a + b, 0);
  const lastPending = pts.length ? pts[pts.length - 1].pending : 0;
  const perMin = series.step_ms ? 60000 / series.step_ms : 1;
  return h("div", { className: "charts", dataset: { testid: "charts" } },
    h("figure", {}, sparkline(done.map((v) => v * perMin), { title: "tasks finished per minute", cls: "ok" }),
      h("figcaption", {}, `finished: ${total} in ${SERIES_MINUTES} min`)),
    h("figure", {}, sparkline(rate, { max: 100, title: "failed or timed out, % of finished", cls: "bad" }),
      h("figcaption", {}, `failure rate: ${total ? ((100 * failed) / total).toFixed(1) : "0"} %`)),
    h("figure", {}, sparkline(pts.map((p) => p.pending), { title: "pending tasks", cls: "backlog" }),
      h("figcaption", {}, `backlog now: ${lastPending}`)),
  );
}

class OverviewView {
  constructor(root) {
    this.root = root;
    this.seriesMissing = false;
  }

  async render() {
    const [queues, workers] = await Promise.all([api("queues"), api("workers")]);
    const alive = workers.workers.filter((w) => w.status === "alive").length;
    const late = workers.workers.filter((w) => w.status === "late").length;
    const dead = workers.workers.filter((w) => w.status === "dead").length;
    const summary = h("p", { className: "summary", dataset: { testid: "worker-summary" } },
      link("#/workers", `workers: ${alive} alive`), late ? `, ${late} late` : "", `, ${dead} dead`,
      ` · ${queues.queues.length} queue${queues.queues.length === 1 ? "" : "s"}`,
      ` · paused: ${queues.queues.filter((q) => q.paused).map((q) => q.name).join(", ") || "none"}`);
    const series = await Promise.all(queues.queues.map((q) => this.series(q)));
    // (a worker's beat changes every read: only who is alive counts here)
    const who = workers.workers.map((w) => [w.name, w.status]);
    if (unchanged(this, [queues, who, series.map((x) => (x instanceof Error ? x.message : x))])) return;
    const cards = queues.queues.map((q, i) => this.card(q, series[i]));
    this.root.replaceChildren(h("h2", {}, "Overview"), summary,
      cards.length ? h("div", { className: "queues" }, cards) : h("p", { className: "muted" }, "No queue has had a task yet."));
  }

  // the queue's series: null without the route, an Error to show in its place
  async series(q) {
    if (this.seriesMissing) return null;
    try {
      const series = await optional(`queues/${encodeURIComponent(q.name)}/series?minutes=${SERIES_MINUTES}`);
      if (series === null) this.seriesMissing = true;
      return series;
    } catch (e) {
      return e;
    }
  }

  card(q, series) {
    const counts = h("table", { className: "counts" },
      h("tr", {}, STATES.map((st) => h("th", {}, st))),
      h("tr", {}, STATES.map((st) => h("td", { dataset: { state: st } },
        link(`#/tasks?queue=${encodeURIComponent(q.name)}&state=${st}`, String(q.counts[st] || 0))))));
    const button = h("button", { type: "button", className: q.paused ? "primary" : "", dataset: { testid: "queue-toggle" } },
      q.paused ? "Resume queue" : "Pause queue");
    button.addEventListener("click", () => this.toggle(q, button));
    let charts;
    if (series === null) charts = notAvailable("throughput charts (GET /queues/{name}/series)");
    else if (series instanceof Error) charts = h("p", { className: "error" }, describeError(series, "the series"));
    else charts = seriesCharts(series);
    return h("section", { className: `queue${q.paused ? " paused" : ""}`, dataset: { testid: "queue", queue: q.name, paused: q.paused ? "1" : "0" } },
      h("header", {}, h("h3", {}, q.name), q.paused ? h("span", { className: "badge PAUSED", dataset: { testid: "paused-badge" } },
          q.paused_shards ? `paused on ${q.paused_shards} shards` : "paused") : null,
        q.unserved ? h("span", { className: "badge FAILED", title: "work waits and no live worker serves it" }, "unserved") : null,
        button),
      h("dl", { className: "facts" },
        h("dt", {}, "backlog"), h("dd", { dataset: { testid: "backlog" } }, String(q.waiting)),
        h("dt", {}, "on the stream"), h("dd", {}, String(q.depth)),
        h("dt", {}, "oldest pending"), h("dd", { dataset: { testid: "oldest" } }, q.oldest_pending_ms ? fmtDuration(q.oldest_pending_ms) : "none"),
        h("dt", {}, "live workers"), h("dd", {}, String(q.workers)),
        h("dt", { title: "tasks waiting on an owner's concurrency limit or a rate limit" }, "held by limits"),
        h("dd", { dataset: { testid: "held" } }, String(q.held || 0))),
      counts, charts);
  }

  async toggle(q, button) {
    button.disabled = true;
    try {
      await api(`queues/${encodeURIComponent(q.name)}/${q.paused ? "resume" : "pause"}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ reason: "from the dashboard" }),
      });
      await this.render();
    } catch (e) {
      report(e, `${q.paused ? "resume" : "pause"} ${q.name}`);
      button.disabled = false;
    }
  }
}
