// A task's page: its graph drawn live, and a subtask drawer with the agent's log and work; for
// a typed plan, its tasks by wave and whether it ended partial; for a workflow document, its
// declared stage and its conversation (the message log).

import {
  api, failed, fetchBlob, h, later, live, notFound, onLeave, show,
} from "./core.js";
import {conversation} from "./conversation.js";
import {subtaskDrawer} from "./drawer.js";
import {criticalPath, graphView} from "./graph.js";
import {blackboard, routeDecisions, taskFacts} from "./taskinfo.js";
import {taskOwned} from "./taskowned.js";
import {graphOrTimeline, timeline} from "./timeline.js";
import {gapBadge, isTyped, partialNote, planDescription, planList} from "./typedplan.js";

const ENDED = {task_complete: "completed", task_failed: "failed", task_cancelled: "cancelled"};
const FINAL = {completed: true, failed: true, cancelled: true, budget_exceeded: true};
// What the task waits for, said beside its status
const WAITING = {awaiting_input: "waiting for your answer",
                 checkpoint_pending: "waiting for your decision"};

// A node's second line: its kind (a typed plan's task: its type) and status, and the retries
// and review rounds it took.
function caption(s) {
  const parts = [isTyped(s) ? s.plan_type : s.kind, s.status];
  if ((s.attempts ?? 0) > 1) parts.push(`${s.attempts} attempts`);
  if (s.review_cycles) parts.push(`${s.review_cycles} fix round(s)`);
  if (s.evaluation?.overall !== undefined && s.evaluation?.overall !== null) {
    parts.push(`score ${Number(s.evaluation.overall).toFixed(1)}`);
  }
  return parts.join(" · ");
}

// Every file of the task as one zip, saved through the browser (the API wants the token in a
// header, which a plain link cannot carry).
async function download(task) {
  const blob = await fetchBlob(`/api/v1/tasks/${task.task_id}/download`);
  const link = h("a", {href: URL.createObjectURL(blob), download: `shoal-${task.task_id}.zip`});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60000);
}

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
  const waiting = h("span", {class: "muted", id: "task-waiting"});
  const setStatus = (now) => {
    badge.dataset.status = now;
    badge.textContent = now;
    waiting.hidden = !WAITING[now];
    waiting.textContent = WAITING[now] || "";
  };
  setStatus(task.status);
  // The document's declared stage (none declared: not shown)
  const stage = h("span", {class: "stage", id: "task-stage"});
  const setStage = (name) => {
    stage.hidden = !name;
    stage.textContent = name ? `Stage: ${name}` : "";
  };
  setStage(task.stage);
  const bar = h("span", {style: `width:${task.progress}%`});
  const canvas = graphView();
  const graph = canvas.graph;  // the nodes' container (`#graph`)
  // A bar selects its subtask; a quality step's, the work it served
  const runs = timeline(task.task_id, (id) => subtasks.has(id)
    && select(subtasks.get(id).target_id || id));
  const aside = h("aside", {class: "drawer", "aria-label": "Subtask"},
                  h("p", {class: "muted"}, "Select a subtask to see its log."));
  const stepsOf = (id) => [...subtasks.values()].filter((q) => q.target_id === id);
  const drawer = subtaskDrawer(aside, stepsOf);
  const plan = planList((id) => select(id));
  const partial = partialNote();
  // Ended with gaps: said by its `task_complete`, or by its subtasks once it completed
  const gapsOf = (t) => (t.status === "completed"
    ? t.subtasks.filter((s) => s.gap && !s.target_id).map((s) => s.name) : []);
  partial.set(gapsOf(task));
  let selected = null;
  const cancel = h("button", {type: "button", id: "cancel", hidden: task.status in FINAL,
    onclick: async () => {
      if (!confirm("Cancel this task? Its running agents are stopped.")) return;
      try {
        await api(`/api/v1/tasks/${task.task_id}/cancel`, {method: "POST"});
      } catch (error) {
        failed(error);
      }
    }}, "Cancel task");
  const facts = taskFacts(task);
  const board = task.workflow === "dag" ? null : blackboard(task);
  const talk = task.workflow === "dag" ? null : conversation(task);
  const routes = routeDecisions();
  show(h("h1", {}, task.description),
       h("p", {}, badge, " ", waiting, " ", stage, " ", partial.element, " ",
         h("span", {class: "muted"}, `${task.workflow} workflow`), " ",
         cancel, " ", h("button", {type: "button", id: "download",
                                   onclick: () => download(task).catch(failed)},
                        "Download files (zip)")),
       facts.element,
       h("div", {class: "progress", role: "progressbar", "aria-label": "Progress"}, bar),
       h("div", {class: "split"},
         h("section", {"aria-label": "Graph"}, graphOrTimeline(canvas.element, runs)), aside),
       plan.element, routes.element, talk ? talk.element : "", board ? board.element : "");
  taskOwned(task);  // its queue place, budget, sources, report, shares; deleting it
  // Figures and the blackboard change as work completes: read again, once for a burst.
  const refresh = later(async () => {
    const fresh = await api(`/api/v1/tasks/${task.task_id}`);
    facts.update(fresh);
    // An ended task's stage (a completed one's is the final stage, which no event announces);
    // a running one's comes with its events
    if (fresh.status in FINAL) setStage(fresh.stage);
    if (partial.element.hidden) partial.set(gapsOf(fresh));  // unless its event said so
    await board?.load();
  }, 300);

  const work = () => [...subtasks.values()].filter((s) => !s.target_id);
  const draw = () => {
    canvas.draw(work, node);
    markCritical();
    relist();
  };
  // The plan's list, drawn again once for a burst of events
  let listing = false;
  const relist = () => {
    if (listing) return;
    listing = true;
    queueMicrotask(() => { listing = false; plan.render(work(), stepsOf); });
  };
  // The critical path, outlined: marked again at most once a frame while events arrive.
  let marking = false;
  const markCritical = () => {
    if (marking) return;
    marking = true;
    requestAnimationFrame(() => {
      marking = false;
      const path = criticalPath(work(), subtasks);
      for (const n of graph.querySelectorAll(".node")) {
        n.classList.toggle("critical", path.has(n.dataset.subtaskId));
      }
    });
  };
  const node = (s) => h("button", {
    class: "node", type: "button", "data-subtask-id": s.subtask_id, "data-status": s.status,
    "data-plan-type": s.plan_type, "data-gap": Boolean(s.gap),
    "aria-description": planDescription(s) || null,
    "aria-pressed": String(selected === s.subtask_id), onclick: () => select(s.subtask_id)},
    gapBadge(s), s.gap ? " " : "", s.name, h("small", {}, caption(s)));
  const select = (id) => {
    selected = id;
    graph.querySelectorAll(".node").forEach((n) =>
      n.setAttribute("aria-pressed", String(n.dataset.subtaskId === id)));
    drawer.show(subtasks.get(id));
  };
  let stale = false;  // the graph lags the replayed past, until `caught_up`
  const update = (s, at) => {
    const known = subtasks.get(s.subtask_id);
    const now = {...known, ...s};
    // When it started and ended, from its events' times (the critical path's durations)
    if (at && s.status === "in_progress" && !now.started_at) now.started_at = at;
    if (at && (s.status === "completed" || s.status === "failed")) now.completed_at = at;
    subtasks.set(s.subtask_id, now);
    if (live.replaying) { stale = true; return; }  // the past: drawn once, when caught up
    if (isTyped(now)) relist();
    if (now.target_id) {  // a quality step: not a node, a line in its work's drawer
      if (selected === now.target_id && known?.status !== now.status) {
        drawer.show(subtasks.get(selected), {changed: true});
      }
      return;
    }
    const el = graph.querySelector(`[data-subtask-id="${s.subtask_id}"]`);
    if (!el || !known || known.gap !== now.gap) { draw(); return; }
    el.dataset.status = now.status;
    el.querySelector("small").textContent = caption(now);
    if (known.status !== now.status) markCritical();
    if (selected === s.subtask_id) drawer.show(now, {changed: known.status !== now.status});
  };
  draw();
  performance.mark("shoal:graph-drawn");  // benchmarks/bench_dashboard.py reads these marks
  const off = live.on((event) => {
    if (event.type === "caught_up") {
      if (stale) {
        stale = false;
        draw();
        if (selected) drawer.show(subtasks.get(selected));
      }
      performance.mark("shoal:caught-up");
    }
    const data = event.data || {};
    if (data.task_id !== task.task_id) return;  // also `subscribed`: nothing to redo
    if (event.type === "subtask_update") { update(data, event.timestamp); runs.soon(); }
    else if (event.type === "task_update" && data.plan) data.plan.forEach((s) => update(s));
    else if (event.type === "agent_log" && data.subtask_id) {
      drawer.log(data.subtask_id, data.line ?? data.message ?? "");
    } else if (event.type === "agent_token" && data.subtask_id) {
      drawer.stream(data.subtask_id, data.text || "");
    } else if (event.type === "route_decision") { routes.add(data); canvas.picked(data); }
    else if (event.type === "stage") setStage(data.stage);
    else if (event.type === "message") talk?.add(data.messages);
    const ended = ENDED[event.type];
    const now = ended || (event.type === "task_update" ? data.status : null);
    if (now) setStatus(now);
    if (event.type === "task_complete" && data.partial) partial.set(data.gaps);
    if (ended) cancel.hidden = true;
    if (ended || (event.type === "subtask_update" && data.status === "completed")) {
      refresh.soon();
    }
    if (ended === "completed") bar.style.width = "100%";
    else if (typeof data.progress === "number" && event.type === "task_update") {
      bar.style.width = `${data.progress}%`;
    }
  });
  onLeave(() => { off(); refresh.cancel(); facts.stop(); runs.stop(); canvas.stop(); });
  board?.load().catch(failed);
  talk?.load().catch(failed);
  live.follow(task.task_id, {replay: true});  // its history (the logs so far), then live
}
