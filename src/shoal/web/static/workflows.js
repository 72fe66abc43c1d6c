// The workflows a task may run: the server's and the user's own. One shown as its document
// (written out as YAML); a document of the user's added (or a new version of one) from a text
// box, with the API's refusal naming its line; one of theirs removed.

import {ApiError, api, failed, h, replaceKeepingFocus, show} from "./core.js";

// ---- a document written out as YAML ----------------------------------------------------------

const RESERVED = /^(true|false|yes|no|on|off|y|n|null|~)$/i;  // words YAML reads otherwise
const PLAIN = /^[A-Za-z_][\w .,'?!()/-]*$/;  // text YAML reads back as the same string
const isMap = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const empty = (v) => v === null || (Array.isArray(v) && !v.length)
  || (isMap(v) && !Object.keys(v).length);

function scalar(value) {
  if (typeof value !== "string") return String(value);
  return PLAIN.test(value) && !RESERVED.test(value) && !/\s$/.test(value) ? value
    : JSON.stringify(value);  // a JSON string is a YAML double-quoted one
}

// Several lines as a literal block (`|`, `|-`), when YAML would read them back unchanged.
function literal(text, pad) {
  const lines = (text.endsWith("\n") ? text.slice(0, -1) : text).split("\n");
  if (text.endsWith("\n\n") || /^\s/.test(text) || text.includes("\r")
      || lines.some((l) => l && !l.trim())) return null;
  return `${text.endsWith("\n") ? "|" : "|-"}\n${lines.map((l) => (l ? pad + l : "")).join("\n")}`;
}

// What follows `key:` or `-`: a scalar on the same line, or the nested lines under it.
function after(value, pad) {
  if (Array.isArray(value)) return value.length ? `\n${yamlLines(value, pad)}` : " []";
  if (isMap(value)) return Object.keys(value).length ? `\n${yamlLines(value, pad)}` : " {}";
  if (typeof value === "string" && value.includes("\n")) {
    const block = literal(value, pad);
    if (block) return ` ${block}`;
  }
  return ` ${scalar(value)}`;
}

// A mapping or a list at indentation `pad`; a mapping leaves out its empty values (null, [] and
// {}: what a document may leave out), and a list's mapping starts on its `-` line.
function yamlLines(value, pad = "") {
  const inner = `${pad}  `;
  if (Array.isArray(value)) {
    return value.map((item) => (isMap(item) && Object.keys(item).length
      ? `${pad}- ${yamlLines(item, inner).slice(inner.length)}`
      : `${pad}-${after(item, inner)}`)).join("\n");
  }
  return Object.entries(value).filter(([, v]) => !empty(v)).map(([key, v]) =>
    `${pad}${PLAIN.test(key) && !RESERVED.test(key) ? key : JSON.stringify(key)}:`
    + `${after(v, inner)}`).join("\n");
}

const asYaml = (doc) => `${yamlLines(doc)}\n`;

// ---- the page --------------------------------------------------------------------------------

// The API's refusal of a document, said with the line it names ("document:7: steps.0.kind: …").
function problemOf(error) {
  const said = (Array.isArray(error.body?.details) && error.body.details[0]?.message)
    || error.message;
  const at = /^document:(\d+): ([\s\S]*)$/.exec(said);
  return at ? {line: Number(at[1]), text: `Line ${at[1]}: ${at[2]}`} : {line: null, text: said};
}

function selectLine(box, line) {
  const lines = box.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((at, l) => at + l.length + 1, 0);
  box.focus();
  box.setSelectionRange(start, start + (lines[line - 1] || "").length);
  const height = parseFloat(getComputedStyle(box).lineHeight) || 20;
  box.scrollTop = Math.max(0, (line - 3) * height);
}

function editor(saved) {
  const box = h("textarea", {id: "workflow-text", rows: 16, spellcheck: "false",
                             "aria-describedby": "workflow-help workflow-error"});
  const error = h("p", {class: "error", id: "workflow-error", role: "alert"});
  const said = h("p", {class: "muted", id: "workflow-said", "aria-live": "polite"});
  const form = h("form", {class: "wide", id: "workflow-form", "aria-labelledby": "editor-title",
                          novalidate: true},
    h("h2", {id: "editor-title"}, "Add one of your own"),
    h("label", {for: "workflow-text"}, "Workflow document (YAML or JSON)"),
    h("small", {class: "muted", id: "workflow-help"}, "Only you see it. To replace one of "
      + "yours, send it again with a higher version: running tasks keep the one they began "
      + "with."),
    box, error, said,
    h("p", {}, h("button", {type: "submit", class: "primary"}, "Add workflow")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    said.textContent = "";
    box.removeAttribute("aria-invalid");
    let added;
    try {
      added = await api("/api/v1/workflows", {method: "POST", json: {document: box.value}});
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 401) throw e;
      const problem = problemOf(e);
      error.textContent = problem.text;
      box.setAttribute("aria-invalid", "true");
      if (problem.line) selectLine(box, problem.line);
      return;
    }
    box.value = "";
    said.textContent = `Added ${added.name}, version ${added.version}.`;
    await saved(added.name);
  });
  return {
    element: form,
    // Start from a document: one of the user's as its next version, the server's as a copy.
    start(w) {
      const name = w.yours ? w.name : `${w.name}_mine`.slice(0, 40);
      box.value = asYaml({...w.document, name, version: w.yours ? w.version + 1 : 1});
      error.textContent = "";
      said.textContent = w.yours ? `Version ${w.version + 1}: it replaces version `
        + `${w.version} when you add it.` : `A copy named ${name}: edit it, then add it.`;
      box.focus();
      box.setSelectionRange(0, 0);
    },
  };
}

export async function workflowsView() {
  const body = h("tbody");
  const detail = h("section", {id: "workflow-detail", "aria-live": "polite"});
  let open = null;  // the workflow shown
  const showOne = async (name) => {
    open = name;
    const w = await api(`/api/v1/workflows/${encodeURIComponent(name)}`);
    detail.replaceChildren(
      h("h2", {}, `${w.name} `, h("span", {class: "muted"}, `version ${w.version}`)),
      h("p", {}, w.description),
      w.document ? h("pre", {class: "code", id: "workflow-document", tabindex: 0,
                             "aria-label": `The ${w.name} workflow's document`},
                     asYaml(w.document))
        : h("p", {class: "muted"}, "This workflow is written in code: it has no document."),
      w.document ? h("p", {}, h("button", {type: "button", id: "workflow-start",
        onclick: () => edit.start(w)}, w.yours ? "Edit as a new version" : "Start from a copy"))
        : "");
    await load();
  };
  const remove = async (w) => {
    if (!confirm(`Remove your workflow ${w.name}, every version? Tasks that run it keep `
                 + "their copy.")) return;
    await api(`/api/v1/workflows/${encodeURIComponent(w.name)}`, {method: "DELETE"});
    if (open === w.name) { open = null; detail.replaceChildren(); }
    await load();
  };
  const row = (w) => h("tr", {"data-workflow": w.name},
    h("td", {}, h("button", {type: "button", class: "link", "data-path": w.name,
      "aria-expanded": String(open === w.name),
      onclick: () => showOne(w.name).catch(failed)}, w.name)),
    h("td", {}, String(w.version)),
    h("td", {}, w.description),
    h("td", {class: "muted"}, w.yours ? "yours" : "this server's"),
    h("td", {}, w.yours ? h("button", {type: "button", "aria-label": `Remove ${w.name}`,
      onclick: () => remove(w).catch(failed)}, "Remove") : ""));
  const load = async () => {
    const {workflows} = await api("/api/v1/workflows");
    replaceKeepingFocus(body, ...workflows.map(row));
  };
  const edit = editor((name) => showOne(name));
  show(h("h1", {}, "Workflows"),
       h("table", {id: "workflows", "aria-label": "Workflows"},
         h("thead", {}, h("tr", {}, ["Name", "Version", "What it does", "Whose", ""].map((t) =>
           h("th", {}, t)))), body),
       detail, edit.element);
  await load();
}
