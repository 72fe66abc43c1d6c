// The task list: filters (status, workflow), a search and pages, kept in the page's address so
// that a reload or a shared link shows the same; live updates without polling; cancel from the
// list after a confirmation.

import {
  age, api, failed, h, later, live, navigate, onLeave, replaceKeepingFocus, show,
} from "./core.js";

const STATUSES = ["pending", "initializing", "in_progress", "checkpoint_pending", "awaiting_input",
                  "completed", "failed", "cancelled", "budget_exceeded"];
const FINAL = new Set(["completed", "failed", "cancelled", "budget_exceeded"]);
const ENDED = new Set(["task_complete", "task_failed", "task_cancelled"]);
const PAGE = 25;

const money = (usd) => (usd ? `$${usd.toFixed(usd < 1 ? 4 : 2)}` : "—");

export async function tasksView() {
  const wanted = new URLSearchParams(location.search);
  const page = Math.max(1, Number(wanted.get("page")) || 1);
  const rows = new Map();
  const body = h("tbody");
  const status = h("select", {id: "filter-status", name: "status"},
    h("option", {value: ""}, "any status"),
    STATUSES.map((s) => h("option", {value: s, selected: wanted.get("status") === s},
                          s.replace("_", " "))));
  const workflow = h("select", {id: "filter-workflow", name: "workflow"},
                     h("option", {value: ""}, "any workflow"));
  const search = h("input", {id: "filter-q", name: "q", type: "search",
                             value: wanted.get("q") || "", placeholder: "Words in the task"});
  const filters = h("form", {class: "filters", role: "search", "aria-label": "Filter tasks"},
    h("label", {for: "filter-status"}, "Status"), status,
    h("label", {for: "filter-workflow"}, "Workflow"), workflow,
    h("label", {for: "filter-q"}, "Search"), search,
    h("button", {type: "submit"}, "Filter"));
  const pager = h("nav", {class: "pager", "aria-label": "Pages"});
  const table = h("table", {"aria-label": "Your tasks"},
    h("thead", {}, h("tr", {}, ["Task", "Workflow", "Status", "Progress", "Cost", "Created", ""]
      .map((t) => h("th", {}, t)))), body);
  show(h("h1", {}, "Tasks"), filters, table, pager);

  const go = (changes) => {
    const next = new URLSearchParams();
    const values = {status: status.value, workflow: workflow.value, q: search.value.trim(),
                    page: 1, ...changes};
    for (const [key, value] of Object.entries(values)) {
      if (value && !(key === "page" && value === 1)) next.set(key, value);
    }
    navigate(`/${next.toString() ? `?${next}` : ""}`);
  };
  filters.addEventListener("submit", (event) => { event.preventDefault(); go({}); });
  status.addEventListener("change", () => go({}));
  workflow.addEventListener("change", () => go({}));

  const cancel = async (task) => {
    if (!confirm(`Cancel "${task.description}"? Its running agents are stopped.`)) return;
    await api(`/api/v1/tasks/${task.task_id}/cancel`, {method: "POST"});
  };
  const row = (task) => {
    const tr = h("tr", {"data-task-id": task.task_id},
      h("td", {}, h("a", {href: `/tasks/${task.task_id}`, "data-link": true}, task.description)),
      h("td", {}, task.workflow),
      h("td", {}, h("span", {class: "badge", "data-status": task.status},
                    task.status.replace("_", " "))),
      h("td", {}, h("div", {class: "progress", role: "progressbar", "aria-valuenow": task.progress,
                            "aria-valuemin": 0, "aria-valuemax": 100,
                            "aria-label": `Progress of ${task.description}`},
                    h("span", {style: `width:${task.progress}%`}))),
      h("td", {class: "cost"}, money(task.usage?.cost_usd)),
      h("td", {class: "muted"}, age(task.created_at)),
      h("td", {}, h("button", {type: "button", class: "cancel", hidden: FINAL.has(task.status),
        "aria-label": `Cancel ${task.description}`,
        onclick: () => cancel(task).catch(failed)}, "Cancel")));
    rows.set(task.task_id, tr);
    return tr;
  };
  const load = async () => {
    const query = new URLSearchParams({limit: PAGE, offset: (page - 1) * PAGE});
    for (const key of ["status", "workflow", "q"]) if (wanted.get(key)) query.set(key, wanted.get(key));
    const found = await api(`/api/v1/tasks?${query}`);
    rows.clear();
    replaceKeepingFocus(body, ...found.tasks.map(row));
    if (!found.tasks.length) {
      body.append(h("tr", {}, h("td", {colspan: 7, class: "muted"},
        wanted.toString() ? "No task matches these filters."
          : "No tasks yet. Submit one from New task, with `shoal submit`, or the API.")));
    }
    const last = Math.max(1, Math.ceil(found.total / PAGE));
    const first = found.total ? (page - 1) * PAGE + 1 : 0;
    pager.replaceChildren(
      h("button", {type: "button", disabled: page <= 1, onclick: () => go({page: page - 1})},
        "Newer"),
      h("span", {class: "muted", id: "page-info"},
        ` ${first}–${(page - 1) * PAGE + found.tasks.length} of ${found.total} `),
      h("button", {type: "button", disabled: page >= last, onclick: () => go({page: page + 1})},
        "Older"));
  };
  const reload = later(load, 100);  // a new task: list again, once for a burst
  const off = live.on((event) => {
    const data = event.data || {};
    const tr = rows.get(data.task_id);
    if (event.type === "subscribed" || event.type === "task_created") {
      reload.soon();
      return;
    }
    if (!tr || !event.type.startsWith("task_")) return;
    if (data.status) {
      const badge = tr.querySelector(".badge");
      badge.dataset.status = data.status;
      badge.textContent = data.status.replace("_", " ");
      tr.querySelector("button.cancel").hidden = FINAL.has(data.status);
    }
    if (typeof data.progress === "number") {
      tr.querySelector(".progress").setAttribute("aria-valuenow", data.progress);
      tr.querySelector(".progress>span").style.width = `${data.progress}%`;
    }
    if (ENDED.has(event.type)) reload.soon();  // its final status and cost
  });
  onLeave(() => { off(); reload.cancel(); });
  const [{workflows}] = await Promise.all([api("/api/v1/workflows"), load()]);
  workflow.append(...workflows.map((w) => h("option", {value: w.name,
                                                     selected: wanted.get("workflow") === w.name},
                                              w.name)));
}
