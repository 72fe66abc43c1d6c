// A task's timeline: each attempt as a bar on its worker's row, from when it was sent to when
// it ended (or now), coloured by its status, so a user sees how parallel the run was and where
// it waited. Read from `GET /api/v1/tasks/{id}/attempts` while it is shown; a table beneath
// says the same in words. And the tabs that show either the graph or the timeline.

import {api, failed, h, later, replaceKeepingFocus} from "./core.js";

const LIVE = new Set(["dispatched", "running"]);
const LINE = 30;  // px: a worker's row holds a line of bars per attempt it ran at once
const TICKS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
               14400, 43200, 86400].map((s) => s * 1000);

// A duration, said briefly: "0.4 s", "12 s", "3 min 5 s", "2 h 10 min".
export function duration(ms) {
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// When an attempt was sent, started and ended (ms); one still going ends now, and one not yet
// started has waited all along.
function times(a, now) {
  const sent = Date.parse(a.dispatched_at);
  const started = a.started_at ? Date.parse(a.started_at) : null;
  const ended = a.finished_at ? Date.parse(a.finished_at)
    : LIVE.has(a.status) ? now : (started ?? sent);
  return {a, sent, started: started ?? ended, ended: Math.max(ended, sent)};
}

// The line of its worker's row each span goes on: the first whose last bar has ended.
function lines(spans) {
  const ends = [];
  return spans.map((s) => {
    let line = ends.findIndex((end) => end <= s.sent);
    if (line < 0) line = ends.length;
    ends[line] = s.ended;
    return line;
  });
}

// How many attempts ran at once at most, and for how long none ran at all (waits included).
function parallelism(spans, start, end) {
  const marks = spans.flatMap((s) => [[s.started, 1], [s.ended, -1]])
    .sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let running = 0, most = 0, idle = 0, since = start;
  for (const [at, step] of marks) {
    if (running === 0) idle += Math.max(0, at - since);
    running += step;
    most = Math.max(most, running);
    if (running === 0) since = at;
  }
  return {most, idle: idle + (running === 0 ? Math.max(0, end - since) : 0)};
}

const workerOf = (a) => a.worker_name || (a.worker_id ? a.worker_id.slice(0, 8) : "no worker");

function bar(s, where, onSelect) {
  const a = s.a;
  const still = LIVE.has(a.status) ? " so far" : "";
  const wait = h("span", {class: "wait"});
  wait.style.width = `${((s.started - s.sent) / Math.max(1, s.ended - s.sent)) * 100}%`;
  const el = h("button", {
    type: "button", class: "bar", id: `attempt-${a.attempt_id}`,
    "data-attempt-id": a.attempt_id, "data-status": a.status, "data-subtask": a.subtask_id,
    "aria-label": `${a.subtask_name} on ${workerOf(a)}: ${a.status}, sent at `
      + `+${duration(s.sent - where.start)}, waited ${duration(s.started - s.sent)}, `
      + `ran ${duration(s.ended - s.started)}${still}`,
    onclick: () => onSelect(a.subtask_id)}, wait, h("span", {class: "label"}, a.subtask_name));
  el.style.cssText = `left:${where.at(s.sent)}%;width:${where.at(s.ended) - where.at(s.sent)}%;`
    + `top:${s.line * LINE}px`;
  return el;
}

function lane(spans, where, onSelect) {
  const name = workerOf(spans[0].a);
  lines(spans).forEach((line, i) => { spans[i].line = line; });
  const track = h("div", {class: "track"}, spans.map((s) => bar(s, where, onSelect)));
  track.style.height = `${(Math.max(...spans.map((s) => s.line)) + 1) * LINE}px`;
  return h("li", {class: "lane", "data-worker-id": spans[0].a.worker_id ?? ""},
           h("span", {class: "worker"}, name), track);
}

function axis(where) {
  const span = where.end - where.start;
  const step = TICKS.find((t) => span / t <= 6) ?? TICKS[TICKS.length - 1];
  const marks = [];
  for (let t = 0; t <= span * 0.9; t += step) {  // the last label would not fit
    const tick = h("span", {class: "tick"}, duration(t));
    tick.style.left = `${(t / span) * 100}%`;
    marks.push(tick);
  }
  return h("div", {class: "axis", "aria-hidden": "true"}, h("span", {}), h("div", {}, marks));
}

function table(spans, start) {
  return h("table", {}, h("caption", {}, "Attempts, in the order they were sent"),
    h("thead", {}, h("tr", {}, ["Step", "Worker", "Status", "Sent", "Waited", "Ran"].map(
      (name) => h("th", {scope: "col"}, name)))),
    h("tbody", {}, spans.map((s) => h("tr", {"data-attempt-id": s.a.attempt_id},
      h("td", {}, s.a.subtask_name), h("td", {}, workerOf(s.a)),
      h("td", {}, h("span", {class: "badge", "data-status": s.a.status}, s.a.status)),
      h("td", {}, `+${duration(s.sent - start)}`), h("td", {}, duration(s.started - s.sent)),
      h("td", {}, duration(s.ended - s.started) + (LIVE.has(s.a.status) ? " so far" : ""))))));
}

function summary(spans, start, end, workers) {
  const {most, idle} = parallelism(spans, start, end);
  const going = spans.some((s) => LIVE.has(s.a.status));
  const n = spans.length;
  return [`${n} attempt${n === 1 ? "" : "s"} on ${workers} worker${workers === 1 ? "" : "s"}`,
          `at most ${most} at once`,
          `${duration(end - start)} from the first sent to ${going ? "now" : "the last ended"}`,
          idle >= 100 ? `nothing ran for ${duration(idle)} of it` : ""]
    .filter(Boolean).join(" · ");
}

// The timeline of task `taskId`; `onSelect(subtask id)` when a bar is chosen. `soon()` reads
// the attempts again (once for a burst of calls); `shown(yes)` as its tab is shown or hidden.
export function timeline(taskId, onSelect) {
  const said = h("p", {class: "muted", id: "timeline-summary"}, "Loading…");
  const body = h("div", {});
  // Kept across redraws, so that it stays open once opened
  const opener = h("summary", {id: "timeline-table"}, "As a table");
  const words = h("details", {}, opener);
  const element = h("div", {class: "timeline", id: "timeline"}, said, body);
  let attempts = [];
  let visible = false;
  let stale = true;  // the attempts changed while the timeline was hidden
  let clock = null;  // redraws each second while an attempt goes on and it is shown
  const render = () => {
    const now = Date.now();
    const spans = attempts.map((a) => times(a, now));
    const going = visible && spans.some((s) => LIVE.has(s.a.status));
    if (going && !clock) clock = setInterval(render, 1000);
    if (!going && clock) { clearInterval(clock); clock = null; }
    if (!spans.length) {
      said.textContent = "No attempt yet.";
      body.replaceChildren();
      return;
    }
    const start = Math.min(...spans.map((s) => s.sent));
    const end = Math.max(...spans.map((s) => s.ended));
    const shown = Math.max(end, start + 1000);  // a second at least: a blink is not a bar
    const where = {start, end: shown, at: (t) => ((t - start) / (shown - start)) * 100};
    const byWorker = new Map();  // worker id → its spans (two workers may share a name)
    for (const s of spans) {
      const id = s.a.worker_id ?? "";
      if (!byWorker.has(id)) byWorker.set(id, []);
      byWorker.get(id).push(s);
    }
    said.textContent = summary(spans, start, end, byWorker.size);
    const rows = table(spans, start);
    if (words.lastElementChild === opener) words.append(rows);
    else words.lastElementChild.replaceWith(rows);
    replaceKeepingFocus(body,
      h("ul", {class: "lanes", "aria-label": "Attempts by worker"},
        [...byWorker.values()].map((list) => lane(list, where, onSelect))),
      axis(where), words);
  };
  const load = async () => {
    if (!visible) { stale = true; return; }
    stale = false;
    attempts = (await api(`/api/v1/tasks/${taskId}/attempts`)).attempts;
    render();
  };
  const reread = later(load, 400);
  return {
    element,
    soon() {
      if (visible) reread.soon();
      else stale = true;
    },
    shown(yes) {
      visible = yes;
      if (!yes) render();  // stops its clock
      else if (stale) load().catch(failed);
      else render();
    },
    stop() {
      reread.cancel();
      clearInterval(clock);
      visible = false;
    },
  };
}

// The graph and the timeline as two tabs of one panel (the arrow keys move between tabs).
export function graphOrTimeline(graphPanel, runs) {
  const views = [["graph", "Graph", graphPanel], ["timeline", "Timeline", runs.element]];
  const panels = views.map(([id, , element]) => h("div", {
    role: "tabpanel", id: `panel-${id}`, "aria-labelledby": `tab-${id}`}, element));
  const tabs = views.map(([id, name], i) => h("button", {
    type: "button", role: "tab", id: `tab-${id}`, "aria-controls": `panel-${id}`,
    onclick: () => choose(i)}, name));
  const choose = (chosen) => {
    tabs.forEach((tab, i) => {
      tab.setAttribute("aria-selected", String(i === chosen));
      tab.tabIndex = i === chosen ? 0 : -1;
      panels[i].hidden = i !== chosen;
    });
    runs.shown(views[chosen][0] === "timeline");
  };
  const onkeydown = (event) => {
    const at = tabs.indexOf(document.activeElement);
    const to = {ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1}[event.key];
    if (at < 0 || to === undefined) return;
    event.preventDefault();
    const next = (to + tabs.length) % tabs.length;
    choose(next);
    tabs[next].focus();
  };
  choose(0);
  return h("div", {class: "views"},
           h("div", {class: "tabs", role: "tablist", "aria-label": "Task views", onkeydown}, tabs),
           ...panels);
}
