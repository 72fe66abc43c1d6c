// A task's open checkpoints, one at a time in a modal dialog.

import {api, h} from "./core.js";

const PENDING = "pending_review";
const CORRECTION_TYPES = ["bug", "incomplete", "wrong_approach", "missing_feature", "style",
                          "other"];

// A task's open checkpoints, one at a time in a modal dialog: why it opened, the work so far
// and its scores; approve, reject with a reason, correct with guidance, or answer a question.
export function checkpoints(initial) {
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
