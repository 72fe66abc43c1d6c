// A subtask's drawer: its status, tool and worker; its attempts and their errors; the evaluation
// as a five-dimension chart with the analysers' findings; the review's findings; its files, each
// highlighted with its changes since the previous attempt; and the agent's log, live.

import {api, failed, h, replaceKeepingFocus} from "./core.js";

// The evaluator's five dimensions (`shoal.tools.evaluator.WEIGHTS`), scored out of 10.
const DIMENSIONS = ["completeness", "code_quality", "security", "architecture", "testability"];
const label = (name) => name.replace("_", " ");
const place = (issue) => (issue.file ? `${issue.file}${issue.line ? `:${issue.line}` : ""}` : "");
const severity = (issue) => h("span", {class: "badge", "data-severity": issue.severity || ""},
                              issue.severity || "note");

export function evaluationChart(evaluation) {
  const scores = evaluation.scores || {};
  const overall = evaluation.overall;
  const rows = DIMENSIONS.map((name) => {
    const score = scores[name];
    const bar = h("span", {class: "bar"});
    bar.style.width = `${typeof score === "number" ? score * 10 : 0}%`;
    return h("li", {"data-dimension": name},
      h("span", {}, label(name)),
      h("span", {class: "meter", "aria-hidden": "true"}, bar),
      h("span", {class: "score"}, typeof score === "number" ? score.toFixed(1) : "n/a"));
  });
  const findings = [];
  for (const [name, dim] of Object.entries(evaluation.dimensions || {})) {
    for (const issue of dim.issues || []) {
      const where = place(issue);
      findings.push(h("li", {"data-severity": issue.severity || ""}, severity(issue),
        ` ${label(name)} · ${issue.tool || "judge"}: ${where && `${where} `}${issue.message || ""}`));
    }
  }
  return h("section", {"aria-label": "Evaluation", id: "evaluation"},
    h("h3", {}, "Evaluation ", h("span", {class: "muted"},
      typeof overall === "number" ? `${overall.toFixed(1)} / 10` : "")),
    h("ul", {class: "chart", "aria-label": "Scores out of 10"}, rows),
    findings.length ? h("details", {}, h("summary", {}, `${findings.length} finding(s)`),
                        h("ul", {class: "findings"}, findings)) : "",
    evaluation.missing?.length ? h("p", {class: "muted"},
      `Not scored: ${evaluation.missing.join(", ")} (failed).`) : "");
}

function reviewSection(review) {
  const issues = (review.issues || []).map((issue) => h("li", {}, severity(issue),
    ` ${place(issue) && `${place(issue)}: `}`,
    issue.description || issue.message || "",
    issue.suggestion ? h("small", {class: "muted"}, ` Suggestion: ${issue.suggestion}`) : ""));
  const score = review.review_score ?? review.score;
  return h("section", {"aria-label": "Review", id: "review"},
    h("h3", {}, "Review ", h("span", {class: "muted"},
      [typeof score === "number" ? `${score} / 10` : "", review.decision].filter(Boolean)
        .join(" · "))),
    review.summary ? h("p", {}, review.summary) : "",
    issues.length ? h("ul", {class: "findings"}, issues) : "");
}

function attemptsSection(history) {
  if (!history.length) return "";
  return h("section", {"aria-label": "Attempts"}, h("h3", {}, "Attempts"),
    h("ol", {class: "attempts"}, history.map((a) => h("li", {"data-attempt-id": a.attempt_id},
      h("span", {class: "badge", "data-status": a.status}, a.status),
      ` ${a.tool || "—"} on ${a.worker_id.slice(0, 8)}`,
      a.usage?.total_tokens ? h("span", {class: "muted"}, ` · ${a.usage.total_tokens} tokens`) : "",
      a.error ? h("p", {class: "error"}, a.error) : ""))));
}

// The quality loop's steps for this work: each evaluation, judge, review and correction round.
function qualitySection(steps) {
  if (!steps.length) return "";
  return h("section", {"aria-label": "Quality steps", id: "quality-steps"},
    h("h3", {}, "Quality steps"),
    h("ol", {class: "attempts"}, steps.map((q) => h("li", {"data-kind": q.kind},
      h("span", {class: "badge", "data-status": q.status}, q.status), ` ${q.name}`,
      q.assigned_tool ? h("small", {class: "muted"}, ` · ${q.assigned_tool}`) : ""))));
}

// One file, highlighted, and (when an earlier attempt wrote it too) its changes since then.
async function fileView(subtaskId, path, into) {
  const base = `/api/v1/subtasks/${subtaskId}`;
  const file = await api(`${base}/previews/${path.split("/").map(encodeURIComponent).join("/")}`);
  const code = h("pre", {class: "code", id: "file-code", tabindex: 0,
                         "aria-label": `${path}${file.language ? ` (${file.language})` : ""}`});
  if (file.html !== null) code.innerHTML = file.html;  // Pygments' escaped output
  else code.textContent = file.note;
  const parts = [h("h4", {}, path, h("span", {class: "muted"}, ` ${file.language || ""}`)), code];
  if (file.previous_attempt_id) {
    const diff = h("pre", {class: "code diff", id: "file-diff", tabindex: 0,
                           "aria-label": `Changes to ${path}`});
    if (file.diff_html) diff.innerHTML = file.diff_html;
    else diff.textContent = file.diff_html === "" ? "No changes since the previous attempt."
      : "This file cannot be compared (binary or too large).";
    parts.push(h("details", {open: true}, h("summary", {}, "Changes since the previous attempt"),
                 diff));
  }
  into.replaceChildren(...parts);
}

// `stepsOf(id)`: the quality steps serving subtask `id` (evaluations, judges, reviews,
// corrections), in the order they were made.
export function subtaskDrawer(element, stepsOf) {
  let current = null;  // the subtask id shown
  let detail = null;   // its attempts, loaded when it is selected or changes status
  let files = [];
  let viewer = h("div", {id: "file-view"});  // the file open in it: kept across redraws
  const logs = new Map();  // subtask id → its log lines, as they arrived
  const streams = new Map();  // subtask id → the model's text streamed so far (its tail)
  const render = (event) => {
    // The subtask as its event said, completed by what the API says of it (attempts,
    // evaluation and review are not in every event)
    const s = detail?.subtask_id === event.subtask_id
      ? {...detail, ...event, attempts: detail.attempt_history.length,
         evaluation: event.evaluation ?? detail.evaluation, review: event.review ?? detail.review}
      : event;
    const log = h("pre", {class: "log", id: "log", "aria-live": "polite"},
                  (logs.get(s.subtask_id) || []).join("\n"));
    const fileList = files.length ? h("ul", {class: "files", "aria-label": "Files"},
      files.map((f) => h("li", {}, h("button", {type: "button", class: "link",
        "data-path": f.path, onclick: () => fileView(f.writer, f.path, viewer).catch(failed)},
        f.path), h("small", {class: "muted"}, ` ${f.size} B`)))) : "";
    replaceKeepingFocus(element, h("h2", {}, s.name),
      h("p", {}, h("span", {class: "badge", "data-status": s.status}, s.status)),
      h("p", {class: "muted"}, `Tool: ${s.assigned_tool || "—"} · worker: `
        + `${s.assigned_worker || "—"} · attempts: ${s.attempts ?? 0}`),
      s.error ? h("p", {class: "error"}, s.error) : "",
      attemptsSection(detail?.attempt_history || []),
      s.evaluation ? evaluationChart(s.evaluation) : "",
      s.review ? reviewSection(s.review) : "",
      qualitySection(stepsOf(s.subtask_id)),
      files.length ? h("section", {"aria-label": "Files"}, h("h3", {}, "Files"), fileList, viewer)
        : "",
      h("h3", {}, "Log"), log,
      h("pre", {class: "log", id: "stream", "aria-label": "Model output, as it streams",
                hidden: !streams.has(s.subtask_id)}, streams.get(s.subtask_id) || ""));
  };
  // The work's files: its own, and those its corrections rewrote (the latest of each path,
  // shown through the subtask that wrote it, so that its diff is against the one before).
  const load = async (s) => {
    const writers = [s, ...stepsOf(s.subtask_id).filter((q) => q.kind === "correct")];
    const [found, ...listed] = await Promise.all([api(`/api/v1/subtasks/${s.subtask_id}`),
      ...writers.map((w) => api(`/api/v1/subtasks/${w.subtask_id}/files`))]);
    if (current !== s.subtask_id) return;
    detail = found;
    const latest = new Map();
    listed.forEach((list, i) => list.files.forEach((f) =>
      latest.set(f.path, {...f, writer: writers[i].subtask_id})));
    files = [...latest.values()].sort((a, b) => a.path.localeCompare(b.path));
    render(s);
  };
  return {
    // Show subtask `s` (selected, or updated while shown); its attempts and files are read
    // again when it is new here or its status changed.
    show(s, {changed = true} = {}) {
      const fresh = current !== s.subtask_id;
      if (!fresh && !changed) return;  // progress only: an open file stays open
      if (fresh) { detail = null; files = []; viewer = h("div", {id: "file-view"}); }
      current = s.subtask_id;
      render(s);
      load(s).catch(failed);
    },
    get current() { return current; },
    // Model text as it streams (live only: the log keeps the whole of it).
    stream(subtaskId, text) {
      const sofar = (streams.get(subtaskId) || "") + text;
      streams.set(subtaskId, sofar.slice(-20000));
      if (current === subtaskId) {
        const at = document.getElementById("stream");
        at.hidden = false;
        at.textContent = streams.get(subtaskId);
      }
    },
    log(subtaskId, line) {
      const lines = logs.get(subtaskId) || [];
      lines.push(line);
      logs.set(subtaskId, lines);
      if (current === subtaskId) document.getElementById("log").textContent = lines.join("\n");
    },
  };
}
