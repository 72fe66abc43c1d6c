// A task's figures (cost, tokens, elapsed time); a route step's decisions (who chose the next
// step, and why the engine overruled the router); and, for a workflow document, its
// blackboard: each entry's latest value, and how many revisions it went through.

import {api, h} from "./core.js";

const FINAL = new Set(["completed", "failed", "cancelled", "budget_exceeded"]);

function elapsed(task) {
  const start = Date.parse(task.started_at || task.created_at);
  const end = task.completed_at ? Date.parse(task.completed_at) : Date.now();
  const s = Math.max(0, Math.round((end - start) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// The figures line; `update(task)` with a fresh task detail, `stop()` ends its clock.
export function taskFacts(task) {
  const element = h("p", {class: "muted", id: "task-facts"});
  let current = task;
  const render = () => {
    const u = current.usage || {};
    element.textContent = [`Cost $${(u.cost_usd || 0).toFixed(4)}`,
      `${(u.input_tokens || 0).toLocaleString()} tokens in`,
      `${(u.output_tokens || 0).toLocaleString()} out`,
      `${FINAL.has(current.status) ? "took" : "running for"} ${elapsed(current)}`].join(" · ");
  };
  const clock = setInterval(() => { if (!FINAL.has(current.status)) render(); }, 1000);
  render();
  return {
    element,
    update(fresh) { current = fresh; render(); },
    stop() { clearInterval(clock); },
  };
}

const shown = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

// A workflow document's blackboard (`GET /api/v1/tasks/{id}/state`), read again by `load`.
export function blackboard(task) {
  const body = h("div", {});
  const element = h("details", {id: "blackboard", open: true},
                    h("summary", {}, "Blackboard"), body);
  return {
    element,
    async load() {
      const view = await api(`/api/v1/tasks/${task.task_id}/state`);
      const entries = Object.entries(view.entries).filter(([, revisions]) => revisions.length);
      body.replaceChildren(...(entries.length ? entries.map(([name, revisions]) => {
        const last = revisions[revisions.length - 1];
        return h("section", {"data-entry": name},
          h("h3", {}, name, h("span", {class: "muted"},
            ` · revision ${last.revision} of ${revisions.length} · by ${last.step}`)),
          h("pre", {class: "code"}, shown(last.value)));
      }) : [h("p", {class: "muted"}, "Nothing written yet.")]));
    },
  };
}

// Each `route_decision` of the task, in order (hidden until the first).
export function routeDecisions() {
  const list = h("ol", {});
  const element = h("section", {id: "route-decisions", "aria-label": "Route decisions",
                                hidden: true}, h("h2", {}, "Route decisions"), list);
  return {
    element,
    add(d) {
      element.hidden = false;
      const overruled = d.by !== "router";
      list.append(h("li", {"data-by": d.by},
        h("strong", {}, d.next || "—"), ` chosen by the ${d.by}`,
        overruled && d.asked ? h("span", {class: "muted"}, ` (the router named ${d.asked})`) : "",
        d.reason ? h("span", {class: "muted"}, `: ${d.reason}`) : ""));
    },
  };
}
