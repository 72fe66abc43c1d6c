// The task list: live, without polling.

import {age, api, h, later, live, onLeave, show} from "./core.js";

export async function tasksView() {
  const rows = new Map();
  const body = h("tbody");
  const table = h("table", {"aria-label": "Your tasks"},
    h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Status"),
                             h("th", {}, "Progress"), h("th", {}, "Created"))), body);
  show(h("h1", {}, "Tasks"), table);
  const row = (task) => {
    const tr = h("tr", {"data-task-id": task.task_id},
      h("td", {}, h("a", {href: `/tasks/${task.task_id}`, "data-link": true}, task.description)),
      h("td", {}, h("span", {class: "badge", "data-status": task.status}, task.status)),
      h("td", {}, h("div", {class: "progress", role: "progressbar", "aria-valuenow": task.progress,
                            "aria-valuemin": 0, "aria-valuemax": 100},
                    h("span", {style: `width:${task.progress}%`}))),
      h("td", {class: "muted"}, age(task.created_at)));
    rows.set(task.task_id, tr);
    return tr;
  };
  const load = async () => {
    const page = await api("/api/v1/tasks?limit=50");
    rows.clear();
    body.replaceChildren(...page.tasks.map(row));
    if (!page.tasks.length) body.append(h("tr", {}, h("td", {colspan: 4, class: "muted"},
      "No tasks yet. Submit one with `shoal submit` or the API.")));
  };
  const reload = later(load, 100);  // a new task: list again, once for a burst
  const off = live.on((event) => {
    const data = event.data || {};
    const tr = rows.get(data.task_id);
    if (event.type === "subscribed" || !tr || event.type === "task_created") {
      reload.soon();
      return;
    }
    if (data.status && event.type.startsWith("task_")) {
      const badge = tr.querySelector(".badge");
      badge.dataset.status = data.status;
      badge.textContent = data.status;
    }
    if (typeof data.progress === "number" && event.type.startsWith("task_")) {
      tr.querySelector(".progress").setAttribute("aria-valuenow", data.progress);
      tr.querySelector(".progress>span").style.width = `${data.progress}%`;
    }
  });
  onLeave(() => { off(); reload.cancel(); });
  await load();
}
