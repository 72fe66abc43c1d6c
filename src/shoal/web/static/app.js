// Shoal's dashboard: one page, one WebSocket, no build step. Views: sign-in, tasks, a task's
// graph with a subtask drawer. Events arrive once: after a drop the socket resumes with
// `since` (the last sequence number seen), and an event at or below it is ignored.

const view = document.getElementById("view");

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "style") el.style.cssText = value;  // not an attribute: the CSP allows it
    else if (value === true) el.setAttribute(key, "");
    else if (value !== false && value !== null && value !== undefined) el.setAttribute(key, value);
  }
  for (const kid of kids.flat()) {
    if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

// ---- the session: tokens in sessionStorage, refreshed before they expire ---------------------

const session = {
  get access() { return sessionStorage.getItem("shoal.access"); },
  get refresh() { return sessionStorage.getItem("shoal.refresh"); },
  timer: null,
  save(pair) {
    sessionStorage.setItem("shoal.access", pair.access_token);
    sessionStorage.setItem("shoal.refresh", pair.refresh_token);
    this.schedule(pair.expires_in);
  },
  clear() {
    sessionStorage.removeItem("shoal.access");
    sessionStorage.removeItem("shoal.refresh");
    clearTimeout(this.timer);
  },
  schedule(seconds) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.renew(), Math.max(5, seconds - 60) * 1000);
  },
  async renew() {
    if (!this.refresh) return false;
    let resp;
    try {
      resp = await fetch("/api/v1/auth/refresh", {
        method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({refresh_token: this.refresh})});
    } catch (error) {
      this.schedule(70);  // the control plane is away (a restart): try again in 10 s
      return false;
    }
    if (!resp.ok) { ended(); return false; }
    this.save(await resp.json());
    return true;
  },
};

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, options = {}, retried = false) {
  if (!session.access) throw new ApiError(401, {message: "Not signed in."});
  const headers = {...(options.headers || {}), Authorization: `Bearer ${session.access}`};
  if (options.json !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method: options.method || "GET", headers,
    body: options.json !== undefined ? JSON.stringify(options.json) : undefined});
  if (resp.status === 401 && !retried && await session.renew()) return api(path, options, true);
  const body = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
  if (!resp.ok) {
    if (resp.status === 401) ended();
    throw new ApiError(resp.status, body);
  }
  return body;
}

// ---- live events: one socket, resumed with `since` -------------------------------------------

const live = {
  socket: null, task: null, since: null, waiting: false, listeners: new Set(), retry: 500,
  wanted: false,
  // Follow every event of the user's from now on (`task` null), or one task's from its first
  // event (`replay`): its history, then live.
  follow(task, {replay = false} = {}) {
    this.wanted = true;
    this.task = task;
    if (replay) this.since = 0;
    if (!this.socket) return this.connect();
    if (this.socket.readyState === WebSocket.OPEN) this.subscribe(replay);
  },
  stop() {
    this.wanted = false;
    this.since = null;
    this.socket?.close();
    this.socket = null;
  },
  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = this.socket = new WebSocket(`${scheme}://${location.host}/ws`);
    socket.onopen = () => {
      socket.send(JSON.stringify({type: "auth", token: session.access}));
      this.subscribe(this.since !== null);
    };
    socket.onmessage = (message) => this.receive(JSON.parse(message.data));
    socket.onclose = () => {
      if (this.socket !== socket) return;
      this.socket = null;
      status("Reconnecting…");
      if (this.wanted) setTimeout(() => this.wanted && !this.socket && this.connect(), this.retry);
      this.retry = Math.min(this.retry * 2, 5000);
    };
  },
  subscribe(resume) {
    const message = {type: "subscribe"};
    if (this.task) message.task_id = this.task;
    if (resume) message.since = this.since;  // the server replays what came after it
    this.waiting = resume;  // until `subscribed`, events are the old subscription's
    this.socket.send(JSON.stringify(message));
  },
  receive(item) {
    if (item.type === "subscribed") {
      this.waiting = false;
      this.retry = 500;
      status("Live");
      for (const listener of this.listeners) listener(item);
      return;
    }
    if (item.type === "pong" || item.type === "error" || item.type === "unsubscribed") return;
    if (this.waiting) return;
    if (item.seq) {
      if (this.since !== null && item.seq <= this.since) return;  // seen before a drop
      this.since = item.seq;
    }
    for (const listener of this.listeners) listener(item);
  },
  on(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  },
};

function status(text) { document.getElementById("live").textContent = text; }

// `work` run once, `ms` after the last of a burst of calls to `soon`; its failure is shown,
// not thrown into the void, and `cancel` drops a run not yet started (the view went away).
function later(work, ms) {
  let timer = null;
  return {
    soon() {
      clearTimeout(timer);
      timer = setTimeout(() => work().catch(failed), ms);
    },
    cancel() { clearTimeout(timer); },
  };
}

function failed(error) {
  if (error instanceof ApiError && error.status === 401) return;  // the session ended: shown
  status(`Could not refresh: ${error.message}`);
}

// ---- views -----------------------------------------------------------------------------------

let leave = () => {};  // what the current view stops when another replaces it

function show(...kids) {
  leave();
  leave = () => {};
  view.replaceChildren(...kids);
}

function loginView(message) {
  live.stop();
  const error = h("p", {class: "error", role: "alert"}, message || "");
  const form = h("form", {class: "card", "aria-labelledby": "login-title"},
    h("h1", {id: "login-title"}, "Sign in to Shoal"),
    h("label", {for: "username"}, "Username"),
    h("input", {id: "username", name: "username", autocomplete: "username", required: true}),
    h("label", {for: "password"}, "Password"),
    h("input", {id: "password", name: "password", type: "password",
                autocomplete: "current-password", required: true}),
    error,
    h("button", {class: "primary", type: "submit"}, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const resp = await fetch("/api/v1/auth/login", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({username: form.username.value, password: form.password.value})});
    const body = await resp.json();
    if (!resp.ok) { error.textContent = body.message || "Could not sign in."; return; }
    session.save(body);
    await whoami();
    const next = new URLSearchParams(location.search).get("next");
    navigate(next && next.startsWith("/") ? next : "/");
  });
  show(form);
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  form.username.focus();
}

function ended() {
  session.clear();
  live.stop();
  show(h("section", {class: "card"}, h("h1", {}, "Your session has ended"),
    h("p", {}, "Sign in again to go on; nothing you submitted is lost."),
    h("a", {href: "/login", "data-link": true}, "Sign in")));
}

function notFound(what) {
  show(h("section", {}, h("h1", {}, "Not found"),
    h("p", {class: "muted"}, `${what} does not exist, or is not yours.`),
    h("a", {href: "/", "data-link": true}, "Back to your tasks")));
}

async function tasksView() {
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
  leave = () => { off(); reload.cancel(); };
  await load();
}

const ENDED = {task_complete: "completed", task_failed: "failed", task_cancelled: "cancelled"};
const FINAL = {completed: true, failed: true, cancelled: true};
const PENDING = "pending_review";
const CORRECTION_TYPES = ["bug", "incomplete", "wrong_approach", "missing_feature", "style",
                          "other"];

// A task's open checkpoints, one at a time in a modal dialog: why it opened, the work so far
// and its scores; approve, reject with a reason, correct with guidance, or answer a question.
function checkpoints(initial) {
  const pending = new Map(initial.filter((c) => c.status === PENDING)
                                 .map((c) => [c.checkpoint_id, c]));
  const dialog = h("dialog", {id: "checkpoint", "aria-labelledby": "checkpoint-title"});
  let showing = null;
  const field = (id, label, control) => h("p", {}, h("label", {for: id}, label), control,
    h("span", {class: "error", id: `${id}-error`, "aria-live": "polite"}));
  const decide = async (action, body, errorField) => {
    try {
      await api(`/api/v1/checkpoints/${showing}/${action}`, {method: "POST", json: body});
    } catch (error) {
      const where = error.body?.details?.[0]?.field?.split(".").pop();
      const target = dialog.querySelector(`#cp-${where}-error`)
        || dialog.querySelector(`#cp-${errorField}-error`);
      target.textContent = error.message;
      return;
    }
    pending.delete(showing);
    close();
  };
  const close = () => { showing = null; dialog.close(); next(); };
  const next = async () => {
    if (showing || !pending.size) return;
    const [id] = pending.keys();
    showing = id;
    let cp;
    try {
      cp = await api(`/api/v1/checkpoints/${id}`);
    } catch (error) {
      pending.delete(id);
      showing = null;
      return next();
    }
    if (cp.status !== PENDING) { pending.delete(id); showing = null; return next(); }
    const score = cp.overall_score ?? cp.evaluation_scores?.overall;
    const parts = [h("h2", {id: "checkpoint-title"}, `Checkpoint: ${cp.reason.replace("_", " ")}`),
      h("p", {}, cp.message || ""),
      score !== null && score !== undefined ? h("p", {class: "muted"}, `Score: ${score}`) : "",
      h("p", {class: "muted"}, `${cp.subtasks_completed.length} subtask(s) done so far.`)];
    if (cp.reason === "question") {
      const answer = h("textarea", {id: "cp-answer", rows: 4, required: true});
      parts.push(field("cp-answer", "Your answer", answer),
        h("button", {class: "primary", type: "button",
                     onclick: () => decide("answer", {answer: answer.value}, "answer")}, "Answer"));
    } else {
      const reason = h("textarea", {id: "cp-reason", rows: 2});
      const kind = h("select", {id: "cp-correction_type"},
                     CORRECTION_TYPES.map((t) => h("option", {value: t}, t.replace("_", " "))));
      const guidance = h("textarea", {id: "cp-guidance", rows: 3});
      const future = h("input", {id: "cp-apply", type: "checkbox"});
      parts.push(
        h("p", {}, h("button", {class: "primary", type: "button",
                                onclick: () => decide("approve", undefined, "reason")}, "Approve")),
        h("fieldset", {}, h("legend", {}, "Reject"), field("cp-reason", "Why (optional)", reason),
          h("button", {type: "button", onclick: () => decide("reject", {reason: reason.value},
                                                              "reason")}, "Reject")),
        h("fieldset", {}, h("legend", {}, "Correct"), field("cp-correction_type", "Type", kind),
          field("cp-guidance", "Guidance", guidance),
          h("p", {}, future, h("label", {for: "cp-apply"}, " Apply to my future subtasks")),
          h("button", {type: "button", onclick: () => decide("correct", {
            correction_type: kind.value, guidance: guidance.value,
            apply_to_future: future.checked}, "guidance")}, "Correct")));
    }
    parts.push(h("p", {}, h("button", {type: "button", onclick: () => dialog.close()},
                            "Decide later")));
    dialog.replaceChildren(...parts);
    dialog.dataset.checkpointId = id;
    dialog.showModal();
  };
  dialog.addEventListener("close", () => { showing = null; });
  return {
    element: dialog,
    next,
    event(event) {
      const data = event.data || {};
      if (event.type === "checkpoint_ready" && data.status === PENDING) {
        pending.set(data.checkpoint_id, data);
        next();
      } else if (event.type === "checkpoint_decided") {
        pending.delete(data.checkpoint_id);
        if (showing === data.checkpoint_id) { showing = null; dialog.close(); next(); }
      }
    },
  };
}

async function taskView(taskId) {
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
  leave = live.on((event) => {
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
  });
  live.follow(task.task_id, {replay: true});  // its history (the logs so far), then live
  decisions.next();
}

// A field's error, from the API's 422: `details[].field` names it ("parameters.max_rounds").
function fieldErrors(form, error) {
  form.querySelectorAll(".error[data-for]").forEach((e) => { e.textContent = ""; });
  const details = Array.isArray(error.body?.details) ? error.body.details
    : error.body?.details?.field ? [error.body.details] : [];
  let shown = false;
  for (const d of details) {
    const at = form.querySelector(`.error[data-for="${CSS.escape(d.field || "")}"]`);
    if (at) { at.textContent = d.message || error.message; shown = true; }
  }
  if (!shown) form.querySelector(".error[data-for=form]").textContent = error.message;
}

function parameterInput(name, p) {
  const id = `parameters.${name}`;
  const attrs = {id, name: id, "data-type": p.type};
  let control;
  if (p.type === "boolean") control = h("input", {...attrs, type: "checkbox", checked: !!p.default});
  else if (p.choices) {
    control = h("select", attrs, p.choices.map((c) => h("option", {value: c, selected: c === p.default}, c)));
  } else {
    control = h("input", {...attrs, type: p.type === "string" ? "text" : "number",
                          value: p.default, min: p.minimum, max: p.maximum,
                          step: p.type === "integer" ? 1 : "any"});
  }
  return h("p", {}, h("label", {for: id}, name), control,
           p.description ? h("small", {class: "muted"}, p.description) : "",
           h("span", {class: "error", "data-for": id, "aria-live": "polite"}));
}

async function submitView() {
  const {workflows} = await api("/api/v1/workflows");
  const select = h("select", {id: "workflow", name: "workflow"},
                   workflows.map((w) => h("option", {value: w.name}, w.name)));
  const about = h("p", {class: "muted", id: "workflow-about"});
  const params = h("div", {id: "parameters"});
  // The API checks every field (and says which): its messages show beside them.
  const form = h("form", {class: "wide", "aria-labelledby": "submit-title", novalidate: true},
    h("h1", {id: "submit-title"}, "New task"),
    h("p", {}, h("label", {for: "description"}, "What should be done?"),
      h("textarea", {id: "description", name: "description", rows: 5, required: true}),
      h("span", {class: "error", "data-for": "description", "aria-live": "polite"})),
    h("p", {}, h("label", {for: "workflow"}, "Workflow"), select), about, params,
    h("p", {}, h("label", {for: "checkpoint_frequency"}, "Checkpoints"),
      h("select", {id: "checkpoint_frequency"}, ["low", "medium", "high"].map((f) =>
        h("option", {value: f, selected: f === "medium"}, f)))),
    h("p", {}, h("label", {for: "privacy_level"}, "Privacy"),
      h("select", {id: "privacy_level"}, ["normal", "sensitive"].map((f) =>
        h("option", {value: f}, f)))),
    h("p", {class: "error", "data-for": "form", role: "alert"}),
    h("button", {class: "primary", type: "submit"}, "Submit"));
  const pick = async () => {
    const chosen = await api(`/api/v1/workflows/${encodeURIComponent(select.value)}`);
    about.textContent = chosen.description;
    const declared = chosen.document?.parameters || {};
    params.replaceChildren(...Object.entries(declared).map(([n, p]) => parameterInput(n, p)));
  };
  select.addEventListener("change", () => pick().catch(failed));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const parameters = {};
    for (const input of params.querySelectorAll("[data-type]")) {
      const name = input.name.slice("parameters.".length);
      const type = input.dataset.type;
      parameters[name] = type === "boolean" ? input.checked
        : type === "integer" || type === "number" ? Number(input.value) : input.value;
    }
    const body = {description: form.description.value, workflow: select.value,
                  checkpoint_frequency: form.checkpoint_frequency.value,
                  privacy_level: form.privacy_level.value};
    if (Object.keys(parameters).length) body.parameters = parameters;
    try {
      const created = await api("/api/v1/tasks", {method: "POST", json: body});
      navigate(`/tasks/${created.task_id}`);
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) fieldErrors(form, error);
      else throw error;
    }
  });
  show(form);
  await pick();
  form.description.focus();
}

async function workersView() {
  const body = h("tbody");
  show(h("h1", {}, "Workers"), h("table", {"aria-label": "Workers"},
    h("thead", {}, h("tr", {}, ["Worker", "Status", "Tools", "Slots", "CPU", "Memory", "Disk",
                                "Last heartbeat"].map((t) => h("th", {}, t)))), body));
  const percent = (v) => (typeof v === "number" ? `${Math.round(v)} %` : "—");
  const load = async () => {
    const {workers} = await api("/api/v1/workers");
    body.replaceChildren(...workers.map((w) => h("tr", {"data-worker-id": w.worker_id},
      h("td", {}, w.machine_name),
      h("td", {}, h("span", {class: "badge", "data-status": w.status}, w.status)),
      h("td", {}, w.tools.join(", ")),
      h("td", {}, String(w.slots)),
      h("td", {}, percent(w.resources.cpu_percent)),
      h("td", {}, percent(w.resources.memory_percent)),
      h("td", {}, percent(w.resources.disk_percent)),
      h("td", {class: "muted"}, w.last_heartbeat ? age(w.last_heartbeat) : "—"))));
    if (!workers.length) body.append(h("tr", {}, h("td", {colspan: 8, class: "muted"},
      "No workers yet. Start one with `shoal worker --server … --token …`.")));
  };
  const reload = later(load, 50);  // once for a burst of updates
  const off = live.on((event) => {
    if (event.type === "worker_update" || event.type === "subscribed") reload.soon();
  });
  leave = () => { off(); reload.cancel(); };
  await load();
}

// ---- routing -----------------------------------------------------------------------------------

function navigate(path) {
  history.pushState(null, "", path);
  route();
}

async function route() {
  const path = location.pathname;
  if (!session.access) {
    return loginView(path === "/login" ? "" : "Sign in to see this page.");
  }
  if (path === "/login") { history.replaceState(null, "", "/"); return route(); }
  document.getElementById("signout").hidden = false;
  const match = path.match(/^\/tasks\/([^/]+)$/);
  try {
    if (match) return await taskView(decodeURIComponent(match[1]));
    live.follow(null);
    if (path === "/") return await tasksView();
    if (path === "/workers") return await workersView();
    if (path === "/new") return await submitView();
    return notFound("This page");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return;
    show(h("p", {class: "error", role: "alert"}, `Something went wrong: ${error.message}`));
  }
}

async function whoami() {
  try {
    const me = await api("/api/v1/users/me");
    document.getElementById("who").textContent = `Signed in as ${me.username}`;
    return true;
  } catch (error) {
    return false;  // the session ended (shown), or the control plane is away
  }
}

async function start() {
  const theme = localStorage.getItem("shoal.theme")
    || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  document.documentElement.dataset.theme = theme;
  document.getElementById("theme").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    localStorage.setItem("shoal.theme", next);
  });
  document.getElementById("signout").addEventListener("click", () => {
    session.clear();
    navigate("/login");
  });
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-link]");
    if (link && !event.ctrlKey && !event.metaKey && !event.shiftKey) {
      event.preventDefault();
      navigate(link.getAttribute("href"));
    }
  });
  addEventListener("popstate", route);
  const params = new URLSearchParams(location.search);
  const oneTime = params.get("token");
  if (oneTime) {  // the one-time link printed by `shoal up`
    history.replaceState(null, "", location.pathname);
    const resp = await fetch("/api/v1/auth/exchange", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({token: oneTime})});
    if (resp.ok) session.save(await resp.json());
    else return loginView((await resp.json()).message);
  } else if (session.refresh) {
    await session.renew();  // a reload: a fresh access token, and its refresh scheduled
  }
  if (session.access && !await whoami()) return;
  await route();
}

start();
