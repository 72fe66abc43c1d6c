// A task's page: its graph drawn live, a subtask drawer with the agent's log, its checkpoints.

import {api, failed, h, live, notFound, onLeave, show} from "./core.js";
import {checkpoints} from "./checkpoints.js";

const ENDED = {task_complete: "completed", task_failed: "failed", task_cancelled: "cancelled"};
const FINAL = {completed: true, failed: true, cancelled: true};

export async function taskView(taskId) {
  let task;
  try {
    task = await api(`/api/v1/tasks/${encodeURIComponent(taskId)}`);
  } catch (error) {
    if (error.status === 404 || error.status === 422) return notFound("This task");
    throw error;
  }
  const subtasks = new Map(task.subtasks.map((s) => [s.subtask_id, s]));
  const badge = h("span", {class: "badge", id: "task-status", "data-status": task.status},
                  task.status);
  const bar = h("span", {style: `width:${task.progress}%`});
  const graph = h("div", {class: "graph", id: "graph", role: "group", "aria-label": "Task graph"});
  const drawer = h("aside", {class: "drawer", "aria-label": "Subtask"},
                   h("p", {class: "muted"}, "Select a subtask to see its log."));
  let selected = null;
  const logs = new Map();  // subtask id → its log lines, as they arrived
  const decisions = checkpoints(task.checkpoints);
  const cancel = h("button", {type: "button", id: "cancel", hidden: task.status in FINAL,
    onclick: async () => {
      if (!confirm("Cancel this task? Its running agents are stopped.")) return;
      try {
        await api(`/api/v1/tasks/${task.task_id}/cancel`, {method: "POST"});
      } catch (error) {
        failed(error);
      }
    }}, "Cancel task");
  show(h("h1", {}, task.description),
       h("p", {}, badge, " ", h("span", {class: "muted"}, `${task.workflow} workflow`), " ",
         cancel),
       h("div", {class: "progress", role: "progressbar", "aria-label": "Progress"}, bar),
       h("div", {class: "split"}, h("section", {"aria-label": "Graph"}, graph), drawer),
       decisions.element);

  const draw = () => {
    const work = [...subtasks.values()].filter((s) => !s.target_id);
    const depth = new Map();
    const depthOf = (s, seen = new Set()) => {
      if (depth.has(s.subtask_id)) return depth.get(s.subtask_id);
      if (seen.has(s.subtask_id)) return 0;
      seen.add(s.subtask_id);
      const parents = s.dependencies.map((d) => subtasks.get(d)).filter(Boolean);
      const d = parents.length ? 1 + Math.max(...parents.map((p) => depthOf(p, seen))) : 0;
      depth.set(s.subtask_id, d);
      return d;
    };
    const layers = [];
    for (const s of work) (layers[depthOf(s)] ||= []).push(s);
    graph.replaceChildren(...layers.filter(Boolean).map((layer) =>
      h("div", {class: "layer"}, layer.map(node))));
  };
  const node = (s) => h("button", {
    class: "node", type: "button", "data-subtask-id": s.subtask_id, "data-status": s.status,
    "aria-pressed": String(selected === s.subtask_id), onclick: () => select(s.subtask_id)},
    s.name, h("small", {}, `${s.kind} · ${s.status}`));
  const select = (id) => {
    selected = id;
    graph.querySelectorAll(".node").forEach((n) =>
      n.setAttribute("aria-pressed", String(n.dataset.subtaskId === id)));
    const s = subtasks.get(id);
    const log = h("pre", {class: "log", id: "log", "aria-live": "polite"},
                  (logs.get(id) || []).join("\n"));
    drawer.replaceChildren(h("h2", {}, s.name),
      h("p", {}, h("span", {class: "badge", "data-status": s.status}, s.status)),
      h("p", {class: "muted"}, `Tool: ${s.assigned_tool || "—"} · attempts: ${s.attempts ?? 0}`),
      s.error ? h("p", {class: "error"}, s.error) : "",
      h("h3", {}, "Log"), log);
  };
  const update = (s) => {
    const known = subtasks.get(s.subtask_id);
    subtasks.set(s.subtask_id, {...known, ...s});
    const el = graph.querySelector(`[data-subtask-id="${s.subtask_id}"]`);
    if (!el || !known) { draw(); return; }
    el.dataset.status = s.status;
    el.querySelector("small").textContent = `${s.kind} · ${s.status}`;
    if (selected === s.subtask_id) select(selected);
  };
  draw();
  onLeave(live.on((event) => {
    const data = event.data || {};
    if (data.task_id !== task.task_id) return;  // also `subscribed`: nothing to redo
    decisions.event(event);
    if (event.type === "subtask_update") update(data);
    else if (event.type === "task_update" && data.plan) data.plan.forEach(update);
    else if (event.type === "agent_log" && data.subtask_id) {
      const lines = logs.get(data.subtask_id) || [];
      lines.push(data.line ?? data.message ?? "");
      logs.set(data.subtask_id, lines);
      if (selected === data.subtask_id) document.getElementById("log").textContent = lines.join("\n");
    }
    const ended = ENDED[event.type];
    const now = ended || (event.type === "task_update" ? data.status : null);
    if (now) { badge.dataset.status = now; badge.textContent = now; }
    if (ended) cancel.hidden = true;
    if (ended === "completed") bar.style.width = "100%";
    else if (typeof data.progress === "number" && event.type === "task_update") {
      bar.style.width = `${data.progress}%`;
    }
  }));
  live.follow(task.task_id, {replay: true});  // its history (the logs so far), then live
  decisions.next();
}
