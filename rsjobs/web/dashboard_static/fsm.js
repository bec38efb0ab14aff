// fsm.js: the task state machine as an SVG graph. The nodes and edges come from the server
// (GET dashboard/fsm.json, built from the table the scripts in Redis enforce); this file
// only lays them out: columns by distance from the start, the terminal states last.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const NODE_W = 112;
const NODE_H = 30;
const COL_GAP = 190;
const ROW_GAP = 58;
const PAD = 30;

function s(tag, attrs = {}, text = "") {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text) node.textContent = text;
  return node;
}

let fsmGraph = null;

async function loadFsm() {
  if (!fsmGraph) {
    const res = await fetch(new URL("dashboard/fsm.json", API));
    if (!res.ok) throw new Error(`the state machine graph: HTTP ${res.status}`);
    fsmGraph = await res.json();
  }
  return fsmGraph;
}

// The events the table allows from `state` (for the buttons a state offers).
function eventsFrom(graph, state) {
  const out = new Set();
  for (const e of graph.edges) if (e.source === state) e.events.forEach((ev) => out.add(ev));
  return out;
}

// Positions: the start node in column 0; a live state one column after the nearest state
// leading to it; every terminal state in the last column. A state only the start leads to
// that leads to others of its column (WAITING, before PENDING and SCHEDULED) gets a column
// of its own before them, at the top, so that the start's other edges pass below it.
function layout(graph) {
  const col = new Map([["", 0]]);
  const queue = [""];
  const terminal = new Set(graph.states.filter((st) => st.terminal).map((st) => st.name));
  while (queue.length) {
    const at = queue.shift();
    for (const e of graph.edges) {
      if (e.source !== at || col.has(e.target) || terminal.has(e.target)) continue;
      col.set(e.target, col.get(at) + 1);
      queue.push(e.target);
    }
  }
  const top = new Set();
  for (const [name, c] of [...col.entries()]) {
    if (name === "" || top.size) continue;
    const entry = graph.edges.every((e) => e.target !== name || e.source === "" || e.source === name);
    const feeds = graph.edges.some((e) => e.source === name && e.target !== name && col.get(e.target) === c);
    if (entry && feeds) {
      for (const [other, oc] of col.entries()) if (other !== name && other !== "" && oc >= c) col.set(other, oc + 1);
      top.add(name);
    }
  }
  const last = Math.max(...col.values()) + 1;
  const columns = [];
  for (const st of graph.states) {
    const c = terminal.has(st.name) ? last : col.has(st.name) ? col.get(st.name) : last;
    (columns[c] = columns[c] || []).push(st.name);
  }
  const rows = Math.max(...columns.map((c) => (c ? c.length : 0)));
  const pos = new Map();
  columns.forEach((names, c) => {
    if (!names) return;
    const offset = names.every((n) => top.has(n)) ? 0 : ((rows - names.length) * ROW_GAP) / 2;
    names.forEach((name, r) => pos.set(name, { x: PAD + c * COL_GAP, y: PAD + 16 + offset + r * ROW_GAP }));
  });
  return { pos, width: PAD * 2 + last * COL_GAP + NODE_W, height: PAD * 2 + 16 + (rows - 1) * ROW_GAP + NODE_H };
}

// What a task's history says about the graph: the edges it took (with the events), the
// states it was in, and the refusals per state (an entry stands for 1 + repeats calls).
function pathOf(entries) {
  const taken = new Map();
  const visited = new Set([""]);
  const refused = new Map();
  for (const e of entries) {
    if (e.rejected) {
      const at = e.from_state;
      const list = refused.get(at) || [];
      list.push(e);
      refused.set(at, list);
      continue;
    }
    if (e.to_state === undefined || e.to_state === "") continue;
    const key = `${e.from_state}|${e.to_state}`;
    if (!taken.has(key)) taken.set(key, new Set());
    taken.get(key).add(e.event);
    visited.add(e.from_state);
    visited.add(e.to_state);
  }
  return { taken, visited, refused };
}

function edgePath(a, b, bend) {
  // from the right side of a to the left side of b (or between rows of one column)
  const sameCol = a.x === b.x;
  let x1;
  let y1;
  let x2;
  let y2;
  if (sameCol) {
    x1 = a.x + NODE_W / 2 + 10 * Math.sign(bend || 1);
    x2 = b.x + NODE_W / 2 + 10 * Math.sign(bend || 1);
    y1 = a.y + (b.y > a.y ? NODE_H : 0);
    y2 = b.y + (b.y > a.y ? 0 : NODE_H);
  } else if (b.x > a.x) {
    x1 = a.x + NODE_W;
    y1 = a.y + NODE_H / 2;
    x2 = b.x;
    y2 = b.y + NODE_H / 2;
  } else {
    x1 = a.x;
    y1 = a.y + NODE_H / 2 + 6;
    x2 = b.x + NODE_W;
    y2 = b.y + NODE_H / 2 + 6;
  }
  const mx = (x1 + x2) / 2;
  const my = (y1 + y2) / 2;
  // bend perpendicular to the line, so that a pair's two directions do not overlap
  const dx = x2 - x1;
  const dy = y2 - y1;
  const len = Math.hypot(dx, dy) || 1;
  const cx = mx + (-dy / len) * bend;
  const cy = my + (dx / len) * bend;
  return { d: `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`, lx: (mx + cx) / 2, ly: (my + cy) / 2 };
}

// The graph of `graph` with the path of a task whose history is `entries` and whose state is
// `current`. Every node and edge carries data-* attributes saying what it shows.
function renderFsm(graph, entries, current) {
  const { pos, width, height } = layout(graph);
  const { taken, visited, refused } = pathOf(entries);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "fsm", role: "img",
    "aria-label": "the task state machine, this task's path highlighted" });
  svg.dataset.testid = "fsm";
  const defs = s("defs");
  for (const [id, color] of [["arrow", "#a7b0bc"], ["arrow-on", "#1a5fb4"]]) {
    const m = s("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    m.append(s("path", { d: "M0,0 L10,5 L0,10 z", fill: color }));
    defs.append(m);
  }
  svg.append(defs);
  const pairs = new Set(graph.edges.map((e) => `${e.source}|${e.target}`));
  const edgeLayer = s("g");
  const labelLayer = s("g");
  for (const e of graph.edges) {
    const key = `${e.source}|${e.target}`;
    const on = taken.get(key);
    const g = s("g", { class: `edge${on ? " taken" : ""}` });
    g.dataset.source = e.source;
    g.dataset.target = e.target;
    g.dataset.taken = on ? "1" : "0";
    g.append(s("title", {}, `${e.source || "(new)"} → ${e.target}: ${e.events.join(", ")}`));
    const a = pos.get(e.source);
    const b = pos.get(e.target);
    if (e.source === e.target) {
      // a loop above the node (HEARTBEAT, PROGRESS; RETRY / REPLAY on a finished task)
      const x = a.x + NODE_W - 24;
      g.append(s("path", { d: `M${x},${a.y} c-8,-22 24,-22 16,0`, class: "line", "marker-end": `url(#${on ? "arrow-on" : "arrow"})` }));
      if (on) labelLayer.append(s("text", { x: x - 4, y: a.y - 14, class: "edge-label", "text-anchor": "end" }, [...on].join(", ")));
    } else {
      const bend = pairs.has(`${e.target}|${e.source}`) ? 14 : a.x === b.x ? 22 : 0;
      const p = edgePath(a, b, bend);
      g.append(s("path", { d: p.d, class: "line", "marker-end": `url(#${on ? "arrow-on" : "arrow"})` }));
      if (on) labelLayer.append(s("text", { x: p.lx, y: p.ly - 4, class: "edge-label", "text-anchor": "middle" }, [...on].join(", ")));
    }
    edgeLayer.append(g);
  }
  svg.append(edgeLayer);
  for (const st of graph.states) {
    const p = pos.get(st.name);
    const classes = ["node"];
    if (st.terminal) classes.push("terminal");
    if (visited.has(st.name)) classes.push("visited");
    if (st.name === current) classes.push("current");
    const g = s("g", { class: classes.join(" "), transform: `translate(${p.x},${p.y})` });
    g.dataset.state = st.name || "NEW";
    g.dataset.visited = visited.has(st.name) ? "1" : "0";
    g.dataset.current = st.name === current ? "1" : "0";
    if (st.name === "") {
      g.append(s("circle", { cx: NODE_W - 10, cy: NODE_H / 2, r: 7 }), s("title", {}, "before the task exists"));
      // the start edge leaves from the dot
      g.append(s("text", { x: NODE_W - 22, y: NODE_H / 2 + 4, "text-anchor": "end", class: "start-label" }, "new"));
    } else {
      g.append(s("rect", { width: NODE_W, height: NODE_H, rx: 6 }));
      if (st.terminal) g.append(s("rect", { x: 3, y: 3, width: NODE_W - 6, height: NODE_H - 6, rx: 4, class: "inner" }));
      g.append(s("text", { x: NODE_W / 2, y: NODE_H / 2 + 4, "text-anchor": "middle" }, st.name));
    }
    const refusals = refused.get(st.name);
    if (refusals) {
      const calls = refusals.reduce((n, e) => n + 1 + (e.repeats || 0), 0);
      const mark = s("g", { class: "refusal", transform: "translate(6,-6)" });
      mark.dataset.testid = "refusal";
      mark.dataset.count = String(calls);
      mark.append(s("circle", { r: 9 }), s("text", { y: 4, "text-anchor": "middle" }, String(calls)));
      mark.append(s("title", {}, `refused here: ${refusals.map((e) => `${e.event} (attempt ${e.attempt}${e.repeats ? `, ×${1 + e.repeats}` : ""})${e.message ? ": " + e.message : ""}`).join("; ")}`));
      g.append(mark);
      g.dataset.refused = String(calls);
    }
    svg.append(g);
  }
  svg.append(labelLayer);
  return svg;
}
