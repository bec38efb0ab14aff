// main.js: the hash routes (#/overview, #/tasks?filters, #/task/<id>, #/workflows,
// #/workflow/<id>, #/workers, #/deadletters, #/costs?by=), the token form, and keeping the open view live.
"use strict";

const ROUTES = {
  overview: (root) => new OverviewView(root),
  tasks: (root, arg, params) => new TaskListView(root, params),
  task: (root, arg) => new TaskDetailView(root, arg),
  workflows: (root, arg, params) => new WorkflowListView(root, params),
  workflow: (root, arg) => new WorkflowDetailView(root, arg),
  workers: (root) => new WorkersView(root),
  deadletters: (root, arg, params) => new DeadLettersView(root, params),
  costs: (root, arg, params) => new CostsView(root, params),
};

// STATES (core.js) from the served state machine, once
async function loadStates() {
  if (STATES.length) return;
  const graph = await loadFsm();
  STATES = graph.states.map((st) => st.name).filter((name) => name !== "");
}

let current = null;
let unsubscribe = null;

function go(name, params = new URLSearchParams()) {
  const q = params.toString();
  location.hash = `#/${name}${q ? "?" + q : ""}`;
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const [name = "overview", arg = ""] = path.split("/").map(decodeURIComponent);
  return { name: ROUTES[name] ? name : "overview", arg, params: new URLSearchParams(query) };
}

async function route() {
  if (current && current.close) current.close();
  if (unsubscribe) unsubscribe();
  unsubscribe = null;
  showBanner("");
  const { name, arg, params } = parseHash();
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("on", a.dataset.view === name.replace(/^(task|workflow)$/, "$1s")));
  const root = h("div", { className: `view-${name}`, dataset: { view: name } });
  $("#view").replaceChildren(root);
  try {
    await loadStates();
  } catch (e) {
    report(e, "the state machine");
    return;
  }
  const view = ROUTES[name](root, arg, params);
  current = view;
  let busy = false;
  const refresh = async () => {
    if (busy || current !== view) return;
    busy = true;
    try {
      await view.render();
      if (banner.dataset.kind === "error" && banner.dataset.from === "refresh") showBanner("");
    } catch (e) {
      if (current === view) {
        report(e, `the ${name} view`);
        banner.dataset.from = "refresh";
      }
    } finally {
      busy = false;
    }
  };
  await refresh();
  // a view with its own stream says what the namespace's events mean to it (onLive)
  if (current === view) unsubscribe = live.subscribe(view.onLive ? () => view.onLive() : refresh);
}

// the token is kept for this tab only (sessionStorage), and checked at once
$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem("rsjobs-token", tokenInput.value);
  live.restart();
  route();
});

window.addEventListener("hashchange", route);
route();
