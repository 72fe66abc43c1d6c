// Open checkpoints, of every task of the user's: a badge in the header counts them, and a
// modal dialog shows one at a time: why it opened, the work so far and its scores; approve,
// reject with a reason, correct with guidance and reference files, answer a question, or read
// a typed plan, then approve, reject or edit it. A checkpoint that opens while the page is
// open is shown at once, on any page; a task's page shows its own on arrival; the badge shows
// the others, one after the other.

import {api, h, live} from "./core.js";
import {planDecision} from "./typedplan.js";

const PENDING = "pending_review";
const PLAN = "plan";  // a typed plan waiting to be approved, edited or rejected
const CORRECTION_TYPES = ["bug", "incomplete", "wrong_approach", "missing_feature", "style",
                          "other"];

export function checkpoints(badge) {
  const pending = new Map();  // checkpoint id → its task id, oldest first
  const queue = [];  // ids to show, in order
  const dialog = h("dialog", {id: "checkpoint", "aria-labelledby": "checkpoint-title"});
  let showing = null;
  let here = null;  // the task whose page is open
  const count = () => {
    badge.hidden = pending.size === 0;
    badge.textContent = `${pending.size} checkpoint${pending.size === 1 ? "" : "s"} waiting`;
  };
  const want = (id) => { if (pending.has(id) && !queue.includes(id)) queue.push(id); next(); };
  const field = (id, label, control) => h("p", {}, h("label", {for: id}, label), control,
    h("span", {class: "error", id: `${id}-error`, "aria-live": "polite"}));
  const decide = async (action, body, errorField) => {
    const decided = showing;  // the dialog may move on to the task's next one meanwhile
    try {
      await api(`/api/v1/checkpoints/${decided}/${action}`, {method: "POST", json: body});
    } catch (error) {
      if (showing !== decided) return;
      const where = error.body?.details?.[0]?.field?.split(".").pop();
      const target = dialog.querySelector(`#cp-${where}-error`)
        || dialog.querySelector(`#cp-${errorField}-error`);
      target.textContent = error.message;
      return;
    }
    const task = pending.get(decided);
    pending.delete(decided);
    count();
    if (showing !== decided) return;  // its `checkpoint_decided` came first: already moved on
    showing = null;
    dialog.close();
    for (const [id, t] of pending) if (t === task) want(id);  // the same task's next one
    next();  // or the next of those the badge asked for
  };
  // Put off: the dialog closes, the badge still counts it (and Escape does the same).
  const later = () => { queue.length = 0; showing = null; dialog.close(); };
  const next = async () => {
    if (showing || !queue.length) return;
    const id = queue.shift();
    if (!pending.has(id)) return next();
    showing = id;
    let cp;
    try {
      cp = await api(`/api/v1/checkpoints/${id}`);
    } catch (error) {
      pending.delete(id);
      count();
      if (showing === id) showing = null;
      return next();
    }
    if (showing !== id) return;  // decided or put off while it was read
    if (cp.status !== PENDING) { pending.delete(id); count(); showing = null; return next(); }
    const score = cp.overall_score ?? cp.evaluation_scores?.overall;
    const parts = [h("h2", {id: "checkpoint-title"}, `Checkpoint: ${cp.reason.replace("_", " ")}`),
      h("p", {}, h("a", {href: `/tasks/${cp.task_id}`, "data-link": true, id: "checkpoint-task",
                     onclick: () => later()}, cp.task_description)),
      h("p", {}, cp.message || ""),
      cp.question && cp.reason !== PLAN  // a plan's is shown as a table, below
        ? h("p", {id: "cp-question"}, h("strong", {}, cp.question)) : "",
      score !== null && score !== undefined ? h("p", {class: "muted"}, `Score: ${score}`) : "",
      h("p", {class: "muted"}, `${cp.subtasks_completed.length} subtask(s) done so far.`)];
    if (cp.reason === PLAN) {
      parts.push(...planDecision(cp, {decide, field}));
    } else if (cp.reason === "question") {
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
      // The files the work produced, to point the correction at
      const produced = cp.subtask_id ? (await api(`/api/v1/subtasks/${cp.subtask_id}/files`)
        .catch(() => ({files: []}))).files : [];
      const references = produced.length ? h("fieldset", {id: "cp-references"},
        h("legend", {}, "Reference files"), produced.map((f) => h("label", {class: "inline"},
          h("input", {type: "checkbox", name: "reference_files", value: f.path}), ` ${f.path}`)))
        : "";
      parts.push(
        h("p", {}, h("button", {class: "primary", type: "button",
                                onclick: () => decide("approve", undefined, "reason")}, "Approve")),
        h("fieldset", {}, h("legend", {}, "Reject"), field("cp-reason", "Why (optional)", reason),
          h("button", {type: "button", onclick: () => decide("reject", {reason: reason.value},
                                                              "reason")}, "Reject")),
        h("fieldset", {}, h("legend", {}, "Correct"), field("cp-correction_type", "Type", kind),
          field("cp-guidance", "Guidance", guidance), references,
          h("p", {}, future, h("label", {for: "cp-apply"}, " Apply to my future subtasks")),
          h("button", {type: "button", onclick: () => decide("correct", {
            correction_type: kind.value, guidance: guidance.value,
            reference_files: [...dialog.querySelectorAll("[name=reference_files]:checked")]
              .map((i) => i.value),
            apply_to_future: future.checked}, "guidance")}, "Correct")));
    }
    parts.push(h("p", {}, h("button", {type: "button", onclick: () => later()},
                            "Decide later")));
    dialog.replaceChildren(...parts);
    dialog.dataset.checkpointId = id;
    dialog.showModal();
  };
  // Every open checkpoint, from the API: at start, and after each (re)subscription, since
  // another task's that opened while the socket was away is not replayed.
  const reload = async () => {
    const {checkpoints: open} = await api(`/api/v1/checkpoints?status=${PENDING}&limit=200`);
    pending.clear();
    for (const c of open.reverse()) pending.set(c.checkpoint_id, c.task_id);
    count();
    for (const [id, task] of pending) if (task === here) want(id);
  };
  dialog.addEventListener("cancel", () => { queue.length = 0; showing = null; });
  badge.addEventListener("click", () => { for (const id of pending.keys()) want(id); });
  document.body.append(dialog);
  live.on((event) => {
    const data = event.data || {};
    if (event.type === "subscribed") reload().catch(() => {});
    // A replayed one may have been decided since: `reload` has what is open now.
    else if (event.type === "checkpoint_ready" && data.status === PENDING && !live.replaying) {
      pending.set(data.checkpoint_id, data.task_id);
      count();
      want(data.checkpoint_id);
    } else if (event.type === "checkpoint_decided") {
      pending.delete(data.checkpoint_id);
      count();
      if (showing === data.checkpoint_id) { showing = null; dialog.close(); next(); }
    }
  });
  return {
    // The task page that is open now (null: another page): its checkpoints are shown first.
    viewing(taskId) {
      here = taskId;
      for (const [id, task] of pending) if (task === here) want(id);
    },
    // Signed out: nothing shown, nothing counted.
    close() {
      queue.length = 0;
      pending.clear();
      count();
      if (showing) dialog.close();
    },
  };
}
