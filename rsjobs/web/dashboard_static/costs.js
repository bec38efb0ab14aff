// costs.js: the namespace's cost totals (GET /costs?by=type|queue|stage|owner): per name,
// its attempts, worker time, deferred wait and charges, how much of each went to waste
// (failed, reclaimed, timed out, cancelled, superseded by a regenerate), and a bar of the
// split per name in the unit the operator picks. docs/costs.md says what each figure is.
"use strict";

const COST_DIMENSIONS = [["type", "Type"], ["queue", "Queue"], ["stage", "Stage"], ["owner", "Owner"]];
const COST_CATEGORIES = ["ok", "failed", "reclaimed", "timed_out", "cancelled", "superseded"];
const COST_BUILTIN = ["attempts", "run_ms", "wait_ms"];

// A figure of `unit` as text: times as durations, charges to the millionth.
function fmtAmount(unit, v) {
  if (v === undefined || v === null) return "–";
  if (unit === "run_ms" || unit === "wait_ms") return fmtDuration(v);
  if (unit === "attempts") return String(v);
  return String(Number(v.toFixed(6)));
}

function pct(part, whole) {
  if (!whole) return "–";
  const p = (100 * part) / whole;
  return `${p < 10 && p > 0 ? p.toFixed(1) : Math.round(p)} %`;
}

// A bar of `totals` split by category, in `unit` (its width: the share of `max`).
function costBar(totals, unit, max) {
  const whole = (totals.total || {})[unit] || 0;
  const bar = h("div", { className: "costbar", title: `${unit}: ${fmtAmount(unit, whole)}` });
  bar.style.width = `${max ? Math.max(2, (100 * whole) / max) : 0}%`;
  for (const c of COST_CATEGORIES) {
    const v = ((totals.categories || {})[c] || {})[unit] || 0;
    if (!v) continue;
    const part = h("span", { className: `cat-${c}`, title: `${c}: ${fmtAmount(unit, v)} (${pct(v, whole)})`, dataset: { category: c } });
    part.style.width = `${(100 * v) / whole}%`;
    bar.append(part);
  }
  return bar;
}

class CostsView {
  constructor(root, params) {
    this.root = root;
    this.by = COST_DIMENSIONS.some(([d]) => d === params.get("by")) ? params.get("by") : "type";
    this.unit = params.get("unit") || "run_ms";
    // the dimension shown, on the view's root: a reader can tell this view's rows from the
    // previous view's, still on the page until this one's first render replaces them
    root.dataset.by = this.by;
  }

  async render() {
    const report = await api(`costs?by=${encodeURIComponent(this.by)}`);
    if (unchanged(this, [report, this.unit])) return;
    const units = new Set(["attempts", "run_ms"]);
    for (const r of [report.total, ...report.rows.map((x) => x.totals)]) {
      for (const u of Object.keys(r.total || {})) units.add(u);
    }
    const charges = [...units].filter((u) => !COST_BUILTIN.includes(u)).sort();
    const shown = ["attempts", "run_ms", ...(units.has("wait_ms") ? ["wait_ms"] : []), ...charges];
    if (!shown.includes(this.unit)) this.unit = "run_ms";

    const tabs = h("nav", { className: "tabs", dataset: { testid: "cost-dims" } },
      COST_DIMENSIONS.map(([d, label]) => link(`#/costs?by=${d}&unit=${encodeURIComponent(this.unit)}`, label,
        { className: d === this.by ? "on" : "", dataset: { dim: d } })));
    const unitSel = h("select", { dataset: { testid: "cost-unit" } }, shown.map((u) => h("option", { value: u }, u)));
    unitSel.value = this.unit;
    unitSel.addEventListener("change", () => go("costs", new URLSearchParams({ by: this.by, unit: unitSel.value })));

    const t = report.total;
    const cards = h("div", { className: "cost-cards", dataset: { testid: "cost-summary" } },
      shown.map((u) => h("div", { className: "box cost-card", dataset: { unit: u } },
        h("div", { className: "muted" }, u),
        h("div", { className: "big" }, fmtAmount(u, (t.total || {})[u] || 0)),
        h("div", { className: (t.waste || {})[u] ? "waste" : "muted", dataset: { testid: "waste-share" } },
          `waste ${fmtAmount(u, (t.waste || {})[u] || 0)} (${pct((t.waste || {})[u] || 0, (t.total || {})[u] || 0)})`))));

    const max = Math.max(0, ...report.rows.map((r) => (r.totals.total || {})[this.unit] || 0));
    const head = ["name", ...shown.map((u) => u), "waste", ...COST_CATEGORIES.slice(1), `split (${this.unit})`];
    const rows = report.rows.map((r) => {
      const tot = r.totals;
      return h("tr", { dataset: { testid: "cost-row", name: r.name } },
        h("td", { className: "mono" }, r.name),
        shown.map((u) => h("td", { className: "num" }, fmtAmount(u, (tot.total || {})[u] || 0))),
        h("td", { className: (tot.waste || {})[this.unit] ? "num waste" : "num muted", dataset: { testid: "row-waste" } },
          pct((tot.waste || {})[this.unit] || 0, (tot.total || {})[this.unit] || 0)),
        COST_CATEGORIES.slice(1).map((c) => {
          const v = ((tot.categories || {})[c] || {})[this.unit];
          return h("td", { className: v ? "num" : "num muted", dataset: { category: c } }, v ? fmtAmount(this.unit, v) : "–");
        }),
        h("td", { className: "barcell" }, costBar(tot, this.unit, max)));
    });
    const legend = h("p", { className: "legend" }, COST_CATEGORIES.map((c) => h("span", {}, h("i", { className: `cat-${c}` }), c)));
    this.root.replaceChildren(
      h("h2", {}, "Costs"),
      h("div", { className: "actions" }, tabs, h("label", { className: "muted" }, "bar and waste in ", unitSel)),
      cards,
      h("table", { className: "list costs", dataset: { testid: "cost-table" } },
        h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colSpan: head.length, className: "muted" }, `no costs recorded per ${this.by} yet`)))),
      legend,
      h("p", { className: "muted" }, "Totals since the costs hash was last reset (docs/costs.md). Waste: attempts that failed, were reclaimed from a lost worker, timed out, were cancelled, or whose work a workflow's regenerate superseded."));
  }
}
