// workflows.js: the workflow list (GET /workflows) and a workflow: its assets per version
// (from its history's ASSET entries, as thumbnails) above the workflow page itself
// (ui/workflow.html, embedded), which shows the stages, tasks and gate actions live.
"use strict";

const WF_PAGE = 50;
const WF_STATES = ["RUNNING", "WAITING_CONFIRMATION", "PARTIALLY_FAILED", "READY_TO_PUBLISH", "PUBLISHED", "FAILED", "CANCELLED"];
const WF_ID = /^[0-9a-f]{32}$/;
const wfStacks = new Map();

function openForm() {
  const input = h("input", { name: "id", placeholder: "workflow id (32 hex characters)", maxLength: 32, dataset: { testid: "wf-open-id" } });
  const form = h("form", { className: "inline", autocomplete: "off" }, input, h("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = input.value.trim().toLowerCase();
    if (!WF_ID.test(id)) return showBanner("a workflow id is 32 lowercase hexadecimal characters");
    location.hash = `#/workflow/${id}`;
  });
  return form;
}

class WorkflowListView {
  constructor(root, params) {
    this.root = root;
    this.params = params;
    this.cursor = params.get("cursor") || "";
    const key = `${params.get("state") || ""}|${params.get("name") || ""}`;
    if (!wfStacks.has(key)) wfStacks.set(key, []);
    this.stack = wfStacks.get(key);
  }

  async render() {
    const q = new URLSearchParams({ limit: String(WF_PAGE) });
    for (const f of ["state", "name"]) if (this.params.get(f)) q.set(f, this.params.get(f));
    if (this.cursor) q.set("cursor", this.cursor);
    const page = await optional(`workflows?${q}`);
    if (unchanged(this, page)) return;
    const head = [h("h2", {}, "Workflows"), openForm()];
    if (page === null) {
      this.root.replaceChildren(...head, notAvailable("the workflow list (GET /workflows); open one by id"));
      return;
    }
    const state = h("select", { name: "state", dataset: { testid: "wf-filter-state" } }, h("option", { value: "" }, "any"),
      WF_STATES.map((st) => h("option", { value: st }, st)));
    state.value = this.params.get("state") || "";
    const name = h("input", { name: "name", value: this.params.get("name") || "", placeholder: "any" });
    const filters = h("form", { className: "filters" }, h("label", {}, "State", state), h("label", {}, "Name", name),
      h("button", { type: "submit" }, "Apply"));
    filters.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      if (state.value) p.set("state", state.value);
      if (name.value.trim()) p.set("name", name.value.trim());
      go("workflows", p);
    });
    const rows = page.workflows.map((w) => h("tr", { dataset: { wfId: w.id, state: w.state, testid: "wf-row" } },
      h("td", {}, link(`#/workflow/${w.id}`, w.id.slice(0, 12) + "…", { title: w.id, className: "mono" })),
      h("td", {}, w.name), h("td", {}, stateBadge(w.state)), h("td", {}, `v${w.version}`), h("td", {}, w.owner || "–"),
      h("td", {}, (w.stages || []).map((st) => h("span", { className: `chip ${st.state}`, title: st.state }, st.name))),
      h("td", {}, fmtDate(w.created_at)), h("td", {}, fmtDate(w.updated_at))));
    const prev = h("button", { type: "button", disabled: !this.cursor }, "← Previous");
    const next = h("button", { type: "button", disabled: !page.cursor }, "Next →");
    const to = (cursor) => {
      const p = new URLSearchParams(this.params);
      if (cursor) p.set("cursor", cursor);
      else p.delete("cursor");
      go("workflows", p);
    };
    prev.addEventListener("click", () => to(this.stack.pop() || ""));
    next.addEventListener("click", () => {
      this.stack.push(this.cursor);
      to(page.cursor);
    });
    this.root.replaceChildren(...head, filters,
      h("table", { className: "list" },
        h("thead", {}, h("tr", {}, ["workflow", "name", "state", "version", "owner", "stages", "created", "updated"].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colSpan: 8, className: "muted" }, "no workflow matches")))),
      h("div", { className: "pager" }, prev, next));
  }
}

class WorkflowDetailView {
  constructor(root, id) {
    this.root = root;
    this.id = id;
    this.after = null;
    this.assets = new Map(); // version -> Map(stage/item -> asset)
    this.versions = h("div", { className: "versions", dataset: { testid: "versions" } });
    const frame = h("iframe", { className: "wf-frame", title: "the workflow", dataset: { testid: "wf-frame" } });
    frame.src = new URL(`ui/workflow.html?embed=1&id=${encodeURIComponent(id)}`, API).href;
    this.root.replaceChildren(h("p", {}, link("#/workflows", "← workflows")),
      h("h2", {}, "Workflow ", h("code", {}, id)),
      h("section", { className: "box" }, h("h3", {}, "Assets per version"), this.versions),
      h("section", { className: "box" }, h("h3", {}, "Stages, tasks and gates"), frame));
    // the embedded page grows with its content: no inner scroll bar
    frame.addEventListener("load", () => {
      const resize = () => {
        if (!frame.contentDocument) return;
        frame.style.height = `${frame.contentDocument.documentElement.scrollHeight + 8}px`;
      };
      resize();
      new ResizeObserver(resize).observe(frame.contentDocument.body);
    });
  }

  // the history's ASSET entries after the last read, grouped by version
  async render() {
    let page;
    do {
      const q = new URLSearchParams({ limit: String(HISTORY_PAGE) });
      if (this.after) q.set("after", this.after);
      page = await api(`workflows/${this.id}/history?${q}`);
      for (const e of page.entries) {
        this.after = e.id;
        if (e.event !== "ASSET" || e.rejected || !e.extra) continue;
        const a = { version: e.version, stage: e.stage, item: e.extra.item || "", ref: e.extra.ref || "", kind: e.extra.kind || "" };
        if (!this.assets.has(a.version)) this.assets.set(a.version, new Map());
        this.assets.get(a.version).set(`${a.stage}/${a.item}`, a);
      }
    } while (page.entries.length === HISTORY_PAGE);
    this.draw();
  }

  draw() {
    const versions = [...this.assets.keys()].sort((a, b) => b - a);
    if (!versions.length) {
      this.versions.replaceChildren(h("p", { className: "muted" }, "no asset yet"));
      return;
    }
    this.versions.replaceChildren(...versions.map((v) => h("div", { className: "version", dataset: { version: String(v), testid: "version" } },
      h("h4", {}, `v${v}`),
      h("div", { className: "assets" }, [...this.assets.get(v).values()].map((a) => {
        const url = assetUrl(this.id, a).href;
        const media = mediaOf(a);
        const fig = h("figure", { className: `asset ${a.kind}`, dataset: { testid: "thumb", stage: a.stage, item: a.item } });
        if (media === "img") fig.append(h("img", { src: url, alt: `${a.stage} ${a.item}`, loading: "lazy", decoding: "async" }));
        else if (media === "video") fig.append(h("video", { src: url, muted: true, loop: true, autoplay: true }));
        else fig.append(link(url, a.ref.split("/").pop(), { target: "_blank", rel: "noopener" }));
        fig.append(h("figcaption", {}, `${a.stage} / ${a.item}`));
        return fig;
      })))));
  }
}
