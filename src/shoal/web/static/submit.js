// The submit form: a workflow's parameters rendered from its declaration, its optional steps as
// switches and a role of the user's own where it allows one, files to attach (uploaded when
// the form is sent), a budget; the API's 422s beside the field they name.

import {ApiError, api, ended, failed, h, navigate, session, show} from "./core.js";

const errorOf = (field) => h("span", {class: "error", "data-for": field, "aria-live": "polite"});

// Where a field's error goes: beside it, else beside the nearest field that holds it
// ("skip.0" → "skip"), else (null) the form's.
function errorSpot(form, field) {
  for (let name = field; name; name = name.slice(0, Math.max(0, name.lastIndexOf(".")))) {
    const at = form.querySelector(`.error[data-for="${CSS.escape(name)}"]`);
    if (at) return at;
  }
  return null;
}

// A field's error, from the API's 422: `details[].field` names it ("parameters.max_rounds").
function fieldErrors(form, error) {
  form.querySelectorAll(".error[data-for]").forEach((e) => { e.textContent = ""; });
  const details = Array.isArray(error.body?.details) ? error.body.details
    : error.body?.details?.field ? [error.body.details] : [];
  let shown = false;
  for (const d of details) {
    const at = errorSpot(form, d.field || "");
    if (at) {
      const said = d.message || error.message;
      at.textContent = at.textContent ? `${at.textContent}; ${said}` : said;
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
           errorOf(id));
}

const choice = (id, label, values, chosen) => h("p", {}, h("label", {for: id}, label),
  h("select", {id, name: id}, values.map((v) => h("option", {value: v, selected: v === chosen}, v))),
  errorOf(id));

// More than most tasks need: tools to prefer (those the workers offer), what agents may do
// without asking, the quality loop, and how long a checkpoint waits for a person.
function advanced(tools) {
  return h("details", {id: "advanced"}, h("summary", {}, "More options"),
    h("fieldset", {}, h("legend", {}, "Prefer these tools"),
      tools.length ? tools.map((t) => h("label", {class: "inline"},
        h("input", {type: "checkbox", name: "tool_preferences", value: t}), ` ${t}`))
        : h("p", {class: "muted"}, "No worker is online to offer tools."),
      errorOf("tool_preferences")),
    h("fieldset", {}, h("legend", {}, "Agents may, without asking"),
      ["edits", "commands", "mcp"].map((k) =>
        choice(`permissions.${k}`, {edits: "Edit files", commands: "Run commands",
                                    mcp: "Use MCP tools"}[k], ["allow", "ask", "deny"], "allow"))),
    choice("quality", "Evaluation, review and checkpoints", ["on", "off"], "on"),
    h("fieldset", {}, h("legend", {}, "A checkpoint waits for you"),
      h("p", {}, h("label", {for: "checkpoint_deadline.seconds"}, "At most (minutes; empty: forever)"),
        h("input", {id: "checkpoint_deadline.seconds", type: "number", min: 1, step: 1}),
        errorOf("checkpoint_deadline.seconds")),
      choice("checkpoint_deadline.action", "Then", ["escalate", "approve", "reject"],
             "escalate")));
}

const byId = (form, id) => form.querySelector(`[id="${id}"]`);

function advancedBody(form) {
  const body = {};
  const tools = [...form.querySelectorAll("input[name=tool_preferences]:checked")]
    .map((i) => i.value);
  if (tools.length) body.tool_preferences = tools;
  const permissions = {};
  for (const k of ["edits", "commands", "mcp"]) permissions[k] = byId(form, `permissions.${k}`).value;
  if (Object.values(permissions).some((v) => v !== "allow")) body.permissions = permissions;
  body.quality = form.querySelector("#quality").value;
  const minutes = byId(form, "checkpoint_deadline.seconds").value;
  if (minutes !== "") {
    body.checkpoint_deadline = {seconds: Number(minutes) * 60,
                                action: byId(form, "checkpoint_deadline.action").value};
  }
  return body;
}

// ---- a budget: tokens, dollars, minutes (each optional) --------------------------------------

function budgetFields() {
  const limit = (id, label, attrs) => h("p", {}, h("label", {for: id}, label),
    h("input", {id, type: "number", inputmode: "decimal", ...attrs}), errorOf(id));
  return h("fieldset", {id: "budget", "aria-describedby": "budget-help"},
    h("legend", {}, "Budget"),
    h("small", {class: "muted", id: "budget-help"},
      "The task stops once it has spent any of these; empty: no limit."),
    h("div", {class: "limits"},
      limit("budget.tokens", "Tokens", {min: 1, step: 1}),
      limit("budget.cost_usd", "Dollars", {min: 0.01, step: 0.01}),
      limit("budget.seconds", "Minutes", {min: 1, step: "any"})),
    errorOf("budget"));
}

function budgetBody(form) {
  const value = (id) => byId(form, id).value;
  const budget = {};
  if (value("budget.tokens") !== "") budget.tokens = Number(value("budget.tokens"));
  if (value("budget.cost_usd") !== "") budget.cost_usd = Number(value("budget.cost_usd"));
  if (value("budget.seconds") !== "") budget.seconds = Number(value("budget.seconds")) * 60;
  return Object.keys(budget).length ? budget : null;
}

// ---- the workflow's optional steps, and a role of the user's own ------------------------------

// A switch per optional step: on, it runs; off, it is sent in `skip`.
function stepSwitches(steps) {
  const optional = steps.filter((s) => s.optional);
  if (!optional.length) return [];
  return [h("legend", {}, "Optional steps"),
    h("small", {class: "muted"}, "Switch a step off to skip it."),
    ...optional.map((s) => h("label", {class: "switch"},
      h("input", {type: "checkbox", role: "switch", name: "run_step", value: s.id,
                  checked: true}),
      ` ${s.id}`, s.role ? h("small", {class: "muted"}, ` ${s.kind} by ${s.role}`) : "")),
    errorOf("skip")];
}

// "Add my own agent": after which step (one that allows it), an id, a prompt, and the tool it
// runs with (the workers' own; at first the one the step before it prefers).
function insertFields(doc, tools) {
  const steps = doc?.steps || [];
  const hosts = steps.filter((s) => s.allows_insert);
  if (!hosts.length) return [];
  const preferred = doc.roles?.[hosts[0].role]?.tools?.find((t) => tools.includes(t));
  return [h("summary", {}, "Add my own agent"),
    h("p", {class: "muted"}, "It runs right after the step you pick, and the steps after that "
      + "one read what it says. Leave its prompt empty to add none."),
    h("p", {}, h("label", {for: "insert.0.after"}, "After step"),
      h("select", {id: "insert.0.after"}, hosts.map((s) => h("option", {value: s.id}, s.id))),
      errorOf("insert.0.after")),
    h("p", {}, h("label", {for: "insert.0.id"}, "Its id"),
      h("input", {id: "insert.0.id", autocomplete: "off", spellcheck: "false",
                  "aria-describedby": "insert-id-help"}),
      h("small", {class: "muted", id: "insert-id-help"},
        "Lowercase letters, digits and _, starting with a letter: fact_check"),
      errorOf("insert.0.id")),
    h("p", {}, h("label", {for: "insert.0.prompt"}, "Its prompt"),
      h("textarea", {id: "insert.0.prompt", rows: 4}), errorOf("insert.0.prompt")),
    h("p", {}, h("label", {for: "insert.0.tools"}, "Its tool"),
      h("select", {id: "insert.0.tools"}, h("option", {value: ""}, "the task's preferred"),
        tools.map((t) => h("option", {value: t, selected: t === preferred}, t))),
      errorOf("insert.0.tools")),
    errorOf("insert")];
}

function ownStepsBody(form) {
  const body = {};
  const skip = [...form.querySelectorAll("input[name=run_step]:not(:checked)")]
    .map((i) => i.value);
  if (skip.length) body.skip = skip;
  const prompt = byId(form, "insert.0.prompt");
  const id = byId(form, "insert.0.id");
  if (prompt && (prompt.value.trim() || id.value.trim())) {
    const tool = byId(form, "insert.0.tools").value;
    body.insert = [{after: byId(form, "insert.0.after").value, id: id.value.trim(),
                    prompt: prompt.value, ...(tool ? {tools: [tool]} : {})}];
  }
  return body;
}

// ---- sources: files uploaded when the form is sent -------------------------------------------

const size = (n) => (n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} kB`
  : `${(n / 1048576).toFixed(1)} MB`);

// POST /api/v1/uploads with the upload's progress (fetch cannot report it); renews the
// session once on a 401, like `api`.
function upload(files, progress, retried = false) {
  return new Promise((resolve, reject) => {
    const data = new FormData();
    for (const file of files) data.append("file", file, file.name);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/v1/uploads");
    const sent = session.access;
    xhr.setRequestHeader("Authorization", `Bearer ${sent}`);
    xhr.responseType = "json";
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) progress(e.loaded / e.total); };
    xhr.onerror = () => reject(new ApiError(0, {message:
      "The upload did not reach the server. Check the connection and send the form again."}));
    xhr.onload = async () => {
      if (xhr.status < 300) return resolve(xhr.response);
      if (xhr.status === 401 && !retried && await session.renewAfter(sent)) {
        return upload(files, progress, true).then(resolve, reject);
      }
      if (xhr.status === 401) ended();
      reject(new ApiError(xhr.status, xhr.response));
    };
    xhr.send(data);
  });
}

// The file input, the files' names (and, once uploaded, their kinds), the upload's progress,
// and the API's refusal (413 too large, 415 a kind it cannot read, 422) beside them. The files
// are uploaded as the form is sent; a submission refused deletes them (`forget`), so nothing of
// it stays behind, and the next try uploads them again.
function sourcesField() {
  const input = h("input", {id: "sources", type: "file", multiple: true,
                            "aria-describedby": "sources-help"});
  const names = h("ul", {class: "chosen", id: "sources-chosen"});
  const progress = h("progress", {id: "sources-progress", max: 1, value: 0, hidden: true,
                                  "aria-label": "Uploading the files"});
  const error = errorOf("sources");
  let uploaded = null;  // the chosen files' uploads, once sent
  const list = () => names.replaceChildren(...(uploaded || [...input.files]).map((f) =>
    h("li", {}, f.name, h("span", {class: "muted"},
      ` · ${f.kind ? `${f.kind} · ` : ""}${size(f.size)}`))));
  input.addEventListener("change", () => { uploaded = null; error.textContent = ""; list(); });
  return {
    element: h("p", {}, h("label", {for: "sources"}, "Attach files"), input,
      h("small", {class: "muted", id: "sources-help"}, "Documents (Markdown, text, HTML, PDF) "
        + "and data (CSV, Parquet, SQLite), or a zip of them; the task reads them as its "
        + "sources."), progress, names, error),
    // The ids to send as `sources` ([] for none); null when the API refused the files.
    async ids() {
      if (!input.files.length) return [];
      if (uploaded) return uploaded.map((u) => u.upload_id);
      error.textContent = "";
      progress.hidden = false;
      progress.value = 0;
      try {
        uploaded = (await upload([...input.files], (done) => { progress.value = done; }))
          .uploads;
      } catch (refused) {
        if (refused.status === 401) throw refused;
        error.textContent = refused.message;
        return null;
      } finally {
        progress.hidden = true;
      }
      list();
      return uploaded.map((u) => u.upload_id);
    },
    clear() { input.value = ""; uploaded = null; list(); },
    // Delete the uploads of a submission the API refused (no task reads them).
    async forget() {
      const made = uploaded || [];
      uploaded = null;
      await Promise.all(made.map((u) => api(`/api/v1/uploads/${u.upload_id}`,
                                            {method: "DELETE"}).catch(() => null)));
    },
  };
}

// ---- the form --------------------------------------------------------------------------------

// What the answer to a submission says when the task waits in the user's queue.
const queuedNotice = (created) => h("p", {class: "notice"},
  h("strong", {}, `Queued: position ${created.queue_position} in your queue. `),
  "It starts when one of your running tasks ends. ",
  h("a", {href: `/tasks/${created.task_id}`, "data-link": true}, "Open the queued task"));

export async function submitView() {
  const [{workflows}, {workers}] = await Promise.all([api("/api/v1/workflows"),
                                                      api("/api/v1/workers")]);
  const tools = [...new Set(workers.filter((w) => w.status !== "offline")
                                   .flatMap((w) => w.tools))].sort();
  const select = h("select", {id: "workflow", name: "workflow"},
                   workflows.map((w) => h("option", {value: w.name}, w.name)));
  const about = h("p", {class: "muted", id: "workflow-about"});
  const params = h("div", {id: "parameters"});
  const switches = h("fieldset", {id: "optional-steps", hidden: true});
  const own = h("details", {id: "insert", hidden: true});
  const files = sourcesField();
  const notice = h("div", {id: "submitted", role: "status"});
  const send = h("button", {class: "primary", type: "submit"}, "Submit");
  // The API checks every field (and says which): its messages show beside them.
  const form = h("form", {class: "wide", "aria-labelledby": "submit-title", novalidate: true},
    h("h1", {id: "submit-title"}, "New task"),
    notice,
    h("p", {}, h("label", {for: "description"}, "What should be done?"),
      h("textarea", {id: "description", name: "description", rows: 5, required: true}),
      errorOf("description")),
    h("p", {}, h("label", {for: "workflow"}, "Workflow"), select), about, params, switches,
    own, files.element, budgetFields(),
    h("p", {}, h("label", {for: "checkpoint_frequency"}, "Checkpoints"),
      h("select", {id: "checkpoint_frequency"}, ["low", "medium", "high"].map((f) =>
        h("option", {value: f, selected: f === "medium"}, f)))),
    h("p", {}, h("label", {for: "privacy_level"}, "Privacy"),
      h("select", {id: "privacy_level"}, ["normal", "sensitive"].map((f) =>
        h("option", {value: f}, f)))),
    advanced(tools),
    h("p", {class: "error", "data-for": "form", role: "alert"}),
    send);
  const pick = async () => {
    const chosen = await api(`/api/v1/workflows/${encodeURIComponent(select.value)}`);
    about.textContent = chosen.description;
    const declared = chosen.document?.parameters || {};
    params.replaceChildren(...Object.entries(declared).map(([n, p]) => parameterInput(n, p)));
    const steps = chosen.document?.steps || [];
    switches.replaceChildren(...stepSwitches(steps));
    switches.hidden = !switches.childElementCount;
    own.replaceChildren(...insertFields(chosen.document, tools));
    own.hidden = !own.childElementCount;
  };
  select.addEventListener("change", () => pick().catch(failed));
  const body = () => {
    const parameters = {};
    for (const input of params.querySelectorAll("[data-type]")) {
      const name = input.name.slice("parameters.".length);
      const type = input.dataset.type;
      parameters[name] = type === "boolean" ? input.checked
        : type === "integer" || type === "number" ? Number(input.value) : input.value;
    }
    const made = {description: form.description.value, workflow: select.value,
                  checkpoint_frequency: form.checkpoint_frequency.value,
                  privacy_level: form.privacy_level.value, ...advancedBody(form),
                  ...ownStepsBody(form)};
    if (Object.keys(parameters).length) made.parameters = parameters;
    const budget = budgetBody(form);
    if (budget) made.budget = budget;
    return made;
  };
  const submit = async () => {
    form.querySelectorAll(".error[data-for]").forEach((e) => { e.textContent = ""; });
    notice.replaceChildren();
    const sources = await files.ids();
    if (sources === null) return;  // refused: its message is beside the files
    const made = body();
    if (sources.length) made.sources = sources;
    let created;
    try {
      created = await api("/api/v1/tasks", {method: "POST", json: made});
    } catch (refused) {
      await files.forget();  // a refused task leaves no upload behind
      throw refused;
    }
    if (created.status !== "queued") return navigate(`/tasks/${created.task_id}`);
    notice.replaceChildren(queuedNotice(created));
    form.description.value = "";
    files.clear();
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    send.disabled = true;
    try {
      await submit();
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) fieldErrors(form, error);
      else throw error;
    } finally {
      send.disabled = false;
    }
  });
  show(form);
  await pick();
  form.description.focus();
}
