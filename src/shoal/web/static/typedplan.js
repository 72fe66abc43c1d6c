// A typed plan on the task page (docs/architecture.md, "Typed plans"): each planned task's type
// and gap on its node; the plan as a list grouped by wave, with what its gate did; whether the
// task ended partial; and the plan checkpoint's part of the dialog, where a person reads the
// plan as a table, then approves it, rejects it or edits its JSON.

import {h, replaceKeepingFocus} from "./core.js";

// Whether a subtask is a typed plan's task, and its wave's name (waves count from 0 in the API,
// from 1 in the "Wave N of M starts" notices and here).
export const isTyped = (s) => typeof s.plan_type === "string";
export const waveName = (wave) => `Wave ${wave + 1}`;

// A gap's badge: the word says it (not only a colour), and its title says why.
export function gapBadge(s) {
  return s.gap ? h("span", {class: "badge gap", title: `Gap: ${s.gap}`}, "gap") : "";
}

// What a node's screen-reader description adds for a typed task: its wave and its gap.
export function planDescription(s) {
  if (!isTyped(s)) return "";
  return [Number.isInteger(s.wave) ? waveName(s.wave) : "",
          s.gap ? `Gap: ${s.gap.replace(/\.$/, "")}` : ""].filter(Boolean).join(". ");
}

// What a gate did for a task: its judges and retries (quality steps that serve it).
function gateSaid(steps) {
  const judged = steps.filter((q) => q.kind === "judge").length;
  const retried = steps.filter((q) => q.kind === "correct").length;
  const times = (n) => (n === 1 ? "once" : `${n} times`);
  return [judged ? `judged ${times(judged)}` : "", retried ? `retried ${times(retried)}` : ""]
    .filter(Boolean).join(", ");
}

// The typed tasks as a table, one group of rows per wave; `render(work, stepsOf)` draws it
// again (hidden while there is no typed task), `onSelect(id)` when a task's name is chosen.
export function planList(onSelect) {
  const body = h("div", {});
  const element = h("section", {id: "plan", "aria-labelledby": "plan-title", hidden: true},
                    h("h2", {id: "plan-title"}, "Plan"), body);
  const row = (s, stepsOf) => h("tr", {"data-subtask-id": s.subtask_id},
    h("td", {}, h("button", {type: "button", class: "link", "data-subtask-id": s.subtask_id,
                             onclick: () => onSelect(s.subtask_id)}, s.name), " ", gapBadge(s)),
    h("td", {}, s.plan_type),
    h("td", {}, h("span", {class: "badge", "data-status": s.status}, s.status)),
    h("td", {}, gateSaid(stepsOf(s.subtask_id)) || "—",
      s.gap ? h("small", {class: "muted gap-why"}, ` Gap: ${s.gap}`) : ""));
  return {
    element,
    render(work, stepsOf) {
      const typed = work.filter(isTyped);
      element.hidden = !typed.length;
      if (!typed.length) return;
      const waves = new Map();  // wave → its tasks, in the order shown
      for (const s of typed) {
        const wave = Number.isInteger(s.wave) ? s.wave : -1;
        if (!waves.has(wave)) waves.set(wave, []);
        waves.get(wave).push(s);
      }
      const order = [...waves.keys()].sort((a, b) => a - b);
      const total = Math.max(...order) + 1;
      replaceKeepingFocus(body, h("table", {"aria-labelledby": "plan-title"},
        h("thead", {}, h("tr", {}, ["Task", "Type", "Status", "Gate"].map(
          (name) => h("th", {scope: "col"}, name)))),
        order.map((wave) => h("tbody", {"data-wave": wave},
          h("tr", {}, h("th", {scope: "rowgroup", colspan: 4, class: "wave"},
            wave < 0 ? "No wave" : `${waveName(wave)} of ${total}`)),
          waves.get(wave).map((s) => row(s, stepsOf))))));
    },
  };
}

// "Partial: 2 gaps" beside the task's status, once it ended with gaps; `set(names)`.
export function partialNote() {
  const element = h("span", {id: "task-partial", hidden: true});
  return {
    element,
    set(gaps) {
      element.hidden = !gaps?.length;
      if (!gaps?.length) return;
      const n = gaps.length;
      element.replaceChildren(
        h("span", {class: "badge partial"}, `Partial: ${n} gap${n === 1 ? "" : "s"}`),
        h("span", {class: "muted"}, ` (${gaps.join(", ")}) ·`));
    },
  };
}

// The plan in a plan checkpoint's question (the text, then its JSON), or null.
export function planIn(question) {
  const at = (question || "").indexOf("{");
  if (at < 0) return null;
  try {
    const plan = JSON.parse(question.slice(at));
    return Array.isArray(plan?.subtasks) ? plan : null;
  } catch {
    return null;
  }
}

function planTable(plan) {
  const names = plan.subtasks.map((t) => t?.name);
  const after = (t) => (Array.isArray(t?.dependencies) ? t.dependencies : [])
    .map((d) => (Number.isInteger(d) ? names[d] ?? `#${d}` : d)).join(", ");
  return h("table", {id: "cp-plan"}, h("caption", {}, "The plan"),
    h("thead", {}, h("tr", {}, ["Task", "Type", "Depends on"].map(
      (name) => h("th", {scope: "col"}, name)))),
    h("tbody", {}, plan.subtasks.map((t) => h("tr", {},
      h("th", {scope: "row"}, String(t?.name ?? "")), h("td", {}, String(t?.type ?? "")),
      h("td", {}, after(t) || "—")))));
}

// A plan checkpoint's part of the dialog: the plan (a table, or the question as it came),
// Approve, Reject with a reason, and Edit plan (its JSON, sent as the answer). `decide(action,
// body, errorField)` and `field(id, label, control)` are the dialog's own.
export function planDecision(cp, {decide, field}) {
  const plan = planIn(cp.question);
  const reason = h("textarea", {id: "cp-reason", rows: 2});
  const edited = h("textarea", {id: "cp-answer", rows: 12, class: "code", spellcheck: "false"},
                   plan ? JSON.stringify(plan, null, 2) : cp.question || "");
  return [
    plan ? planTable(plan) : h("pre", {class: "code", id: "cp-question"}, cp.question || ""),
    h("p", {}, h("button", {class: "primary", type: "button",
                            onclick: () => decide("approve", undefined, "reason")}, "Approve")),
    h("fieldset", {}, h("legend", {}, "Reject"), field("cp-reason", "Why (optional)", reason),
      h("button", {type: "button",
                   onclick: () => decide("reject", {reason: reason.value}, "reason")}, "Reject")),
    h("details", {id: "cp-edit"}, h("summary", {}, "Edit plan"),
      field("cp-answer", "The plan (JSON, as the planner writes it)", edited),
      h("button", {type: "button", onclick: () => decide("answer", {answer: edited.value},
                                                        "answer")}, "Run the edited plan")),
  ];
}
