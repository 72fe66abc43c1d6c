// The submit form: a workflow's parameters rendered from its declaration, the API's 422s beside
// the field they name.

import {ApiError, api, failed, h, navigate, show} from "./core.js";

// A field's error, from the API's 422: `details[].field` names it ("parameters.max_rounds").
function fieldErrors(form, error) {
  form.querySelectorAll(".error[data-for]").forEach((e) => { e.textContent = ""; });
  const details = Array.isArray(error.body?.details) ? error.body.details
    : error.body?.details?.field ? [error.body.details] : [];
  let shown = false;
  for (const d of details) {
    const at = form.querySelector(`.error[data-for="${CSS.escape(d.field || "")}"]`);
    if (at) {
      at.textContent = d.message || error.message;
      at.closest("details")?.setAttribute("open", "");  // an error is never hidden
      shown = true;
    }
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

const choice = (id, label, values, chosen) => h("p", {}, h("label", {for: id}, label),
  h("select", {id, name: id}, values.map((v) => h("option", {value: v, selected: v === chosen}, v))),
  h("span", {class: "error", "data-for": id, "aria-live": "polite"}));

// More than most tasks need: tools to prefer (those the workers offer), what agents may do
// without asking, the quality loop, and how long a checkpoint waits for a person.
function advanced(tools) {
  return h("details", {id: "advanced"}, h("summary", {}, "More options"),
    h("fieldset", {}, h("legend", {}, "Prefer these tools"),
      tools.length ? tools.map((t) => h("label", {class: "inline"},
        h("input", {type: "checkbox", name: "tool_preferences", value: t}), ` ${t}`))
        : h("p", {class: "muted"}, "No worker is online to offer tools."),
      h("span", {class: "error", "data-for": "tool_preferences", "aria-live": "polite"})),
    h("fieldset", {}, h("legend", {}, "Agents may, without asking"),
      ["edits", "commands", "mcp"].map((k) =>
        choice(`permissions.${k}`, {edits: "Edit files", commands: "Run commands",
                                    mcp: "Use MCP tools"}[k], ["allow", "ask", "deny"], "allow"))),
    choice("quality", "Evaluation, review and checkpoints", ["on", "off"], "on"),
    h("fieldset", {}, h("legend", {}, "A checkpoint waits for you"),
      h("p", {}, h("label", {for: "checkpoint_deadline.seconds"}, "At most (minutes; empty: forever)"),
        h("input", {id: "checkpoint_deadline.seconds", type: "number", min: 1, step: 1}),
        h("span", {class: "error", "data-for": "checkpoint_deadline.seconds",
                   "aria-live": "polite"})),
      choice("checkpoint_deadline.action", "Then", ["escalate", "approve", "reject"],
             "escalate")));
}

function advancedBody(form) {
  const body = {};
  const tools = [...form.querySelectorAll("input[name=tool_preferences]:checked")]
    .map((i) => i.value);
  if (tools.length) body.tool_preferences = tools;
  const permissions = {};
  for (const k of ["edits", "commands", "mcp"]) {
    permissions[k] = form.querySelector(`[id="permissions.${k}"]`).value;
  }
  if (Object.values(permissions).some((v) => v !== "allow")) body.permissions = permissions;
  body.quality = form.querySelector("#quality").value;
  const minutes = form.querySelector(`[id="checkpoint_deadline.seconds"]`).value;
  if (minutes !== "") {
    body.checkpoint_deadline = {seconds: Number(minutes) * 60,
      action: form.querySelector(`[id="checkpoint_deadline.action"]`).value};
  }
  return body;
}

export async function submitView() {
  const [{workflows}, {workers}] = await Promise.all([api("/api/v1/workflows"),
                                                      api("/api/v1/workers")]);
  const tools = [...new Set(workers.filter((w) => w.status !== "offline")
                                   .flatMap((w) => w.tools))].sort();
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
    advanced(tools),
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
                  privacy_level: form.privacy_level.value, ...advancedBody(form)};
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
