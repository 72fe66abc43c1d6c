// What a task's owner sees beside its graph: its place in the queue, what it has spent of each
// limit of its budget, the sources it reads, its report (a sandboxed page, a PDF, share links
// to it), and deleting it. `taskOwned(task)` adds them to the task page once it is shown and
// keeps them current from the page's live events; they stop when the page goes.

import {
  ApiError, age, api, failed, fetchBlob, h, holding, later, live, navigate, session, show,
} from "./core.js";
import {citationList} from "./citations.js";

const FINAL = new Set(["completed", "failed", "cancelled", "budget_exceeded"]);
const QUIET = new Set(["agent_log", "agent_token"]);  // change nothing shown here

const size = (n) => (n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} kB`
  : `${(n / 1048576).toFixed(1)} MB`);

function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function ran(task) {
  if (!task.started_at) return 0;
  const end = task.completed_at ? Date.parse(task.completed_at) : Date.now();
  return Math.max(0, (end - Date.parse(task.started_at)) / 1000);
}

// ---- the queue, the budget, the sources ------------------------------------------------------

function queuePlace() {
  const element = h("p", {id: "queue-position", class: "notice", role: "status", hidden: true});
  return {
    element,
    update(task) {
      element.hidden = task.status !== "queued";
      element.textContent = element.hidden ? "" : `Queued: position ${task.queue_position ?? "…"}`
        + " in your queue. It starts when one of your running tasks ends.";
    },
  };
}

// Each limit: its name, what the task has used of it, and how an amount is said.
const LIMITS = [
  {key: "tokens", label: "Tokens", say: (n) => Math.round(n).toLocaleString(),
   used: (t) => (t.usage?.input_tokens || 0) + (t.usage?.output_tokens || 0)},
  {key: "cost_usd", label: "Cost", say: (n) => `$${n.toFixed(n && n < 1 ? 4 : 2)}`,
   used: (t) => t.usage?.cost_usd || 0},
  {key: "seconds", label: "Time", say: duration, used: ran},
];

function meter(limit, used, most) {
  const share = Math.min(1, used / most);
  const said = `${limit.say(used)} of ${limit.say(most)}`;
  return h("li", {"data-limit": limit.key},
    h("span", {}, limit.label),
    h("span", {class: "meter", role: "progressbar", "aria-label": `${limit.label} used`,
               "aria-valuemin": 0, "aria-valuemax": 100,
               "aria-valuenow": Math.round(share * 100), "aria-valuetext": said,
               "data-over": used >= most},
      h("span", {class: "fill", style: `width:${(share * 100).toFixed(1)}%`})),
    h("span", {class: "used"}, said));
}

// Used against each limit the task was given, a bar each (hidden without a budget).
function budgetUse() {
  const list = h("ul", {class: "budget"});
  const element = h("section", {id: "budget-use", "aria-labelledby": "budget-use-title",
                                hidden: true},
                    h("h2", {id: "budget-use-title"}, "Budget"), list);
  return {
    element,
    update(task) {
      const budget = task.budget || {};
      const limits = LIMITS.filter((l) => typeof budget[l.key] === "number");
      element.hidden = !limits.length;
      list.replaceChildren(...limits.map((l) => meter(l, l.used(task), budget[l.key])));
    },
  };
}

function sourceList(task) {
  const sources = task.sources || [];
  return h("section", {id: "sources", "aria-labelledby": "sources-title",
                       hidden: !sources.length},
    h("h2", {id: "sources-title"}, "Sources"),
    h("ul", {class: "sources"}, sources.map((s) => h("li", {"data-source": s.name},
      h("strong", {}, s.name), h("span", {class: "muted"}, ` · ${s.kind} · ${size(s.size)}`)))));
}

// ---- the report: a sandboxed page, a PDF, share links -----------------------------------------

// The report's HTML page (`Accept: text/html`: the API sanitised it), or null while it has
// none. `api` reads JSON only, hence this request of its own.
async function reportPage(taskId, retried = false) {
  const sent = session.access;
  const resp = await fetch(`/api/v1/tasks/${taskId}/report`, {
    headers: {Accept: "text/html", Authorization: `Bearer ${sent}`}});
  if (resp.status === 401 && !retried && await session.renewAfter(sent)) {
    return reportPage(taskId, true);
  }
  if (resp.ok) return resp.text();
  const body = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
  if (body?.error === "no_report") return null;
  throw new ApiError(resp.status, body);
}

// The report's own stylesheet, redone for the dark theme.
const DARK = ":root{--ink:#e6e9ee;--muted:#9aa4b2;--rule:#2a313b;--wash:#1a2029;"
  + "--accent:#6ea0ff}html{background:#12161c}";

// The page in a sandboxed frame: no script runs in it, no form is sent from it, and its links
// open in a new tab. The dashboard's policy (inherited by the frame) refuses the page's inline
// stylesheet, so the dashboard lends it through the CSSOM, which needs the frame same-origin.
function reportFrame() {
  const frame = h("iframe", {id: "report-frame", title: "The report",
    sandbox: "allow-same-origin allow-popups allow-popups-to-escape-sandbox"});
  let css = "";
  const fit = () => {
    const inner = frame.contentDocument;
    if (!inner?.documentElement) return;
    frame.style.height = `${Math.ceil(inner.documentElement.getBoundingClientRect().height)}px`;
  };
  const dress = () => {
    const inner = frame.contentDocument;
    if (!inner?.documentElement || !frame.contentWindow) return;
    const sheets = [css, document.documentElement.dataset.theme === "dark" ? DARK : ""]
      .map((text) => {
        const sheet = new frame.contentWindow.CSSStyleSheet();
        sheet.replaceSync(text);
        return sheet;
      });
    inner.adoptedStyleSheets = sheets;
    fit();
  };
  frame.addEventListener("load", dress);
  const themed = new MutationObserver(() => (frame.isConnected ? dress() : themed.disconnect()));
  themed.observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
  // Fitted in the next frame, not in the observer's callback: resizing what it watches from
  // there would be a resize loop.
  const resized = new ResizeObserver(() => (frame.isConnected ? requestAnimationFrame(fit)
    : resized.disconnect()));
  resized.observe(frame);
  return {
    element: frame,
    // The page's stylesheets are cut out as text: even parsing them (DOMParser) would have
    // the policy refuse them. The report's body has no <style> (the API drops it), and its
    // text's "<" is escaped, so only the page's own stylesheet matches.
    show(html) {
      const sheets = [];
      const page = html.replace(/<style>([\s\S]*?)<\/style>/gi, (_, text) => {
        sheets.push(text);
        return "";
      });
      css = sheets.join("\n");
      frame.srcdoc = page.replace(/<head>/i, '<head><base target="_blank">');
    },
  };
}

async function downloadPdf(taskId) {
  const blob = await fetchBlob(`/api/v1/tasks/${taskId}/report.pdf`);
  const link = h("a", {href: URL.createObjectURL(blob), download: `report-${taskId}.pdf`});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60000);
}

async function copy(input, said) {
  try {
    await navigator.clipboard.writeText(input.value);
    said.textContent = "Copied.";
  } catch {
    input.select();  // the browser refused: the link is selected, for the keyboard to copy
    said.textContent = "Press Ctrl+C (⌘C) to copy the selected link.";
  }
}

// Share links: create one (its URL shown once, with a Copy button), list them, revoke one.
function shareLinks(taskId) {
  const base = `/api/v1/tasks/${taskId}/shares`;
  const fresh = h("div", {id: "new-share", "aria-live": "polite"});
  const body = h("tbody");
  const table = h("table", {id: "shares", "aria-label": "Share links", hidden: true},
    h("thead", {}, h("tr", {}, ["Created", "Last opened", ""].map((t) => h("th", {}, t)))),
    body);
  const error = h("span", {class: "error", "aria-live": "polite"});
  const load = async () => {
    const {shares} = await api(base);
    table.hidden = !shares.length;
    body.replaceChildren(...shares.map((s) => h("tr", {"data-share-id": s.share_id},
      h("td", {title: s.created_at}, age(s.created_at)),
      h("td", {class: "muted"}, s.last_used_at ? age(s.last_used_at) : "never"),
      h("td", {}, h("button", {type: "button", "aria-label": `Revoke the link created `
        + `${age(s.created_at)}`, onclick: () => revoke(s).catch(failed)}, "Revoke")))));
  };
  const revoke = async (s) => {
    if (!confirm("Revoke this link? It opens nothing from now on.")) return;
    await api(`${base}/${s.share_id}`, {method: "DELETE"});
    if (fresh.dataset.shareId === s.share_id) fresh.replaceChildren();
    await load();
  };
  const create = async () => {
    error.textContent = "";
    let made;
    try {
      made = await api(base, {method: "POST"});
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 401) throw e;
      error.textContent = e.message;
      return;
    }
    const url = h("input", {id: "share-url", readonly: true, value: made.url,
                            "aria-label": "The new share link"});
    const said = h("span", {class: "muted", "aria-live": "polite"});
    fresh.dataset.shareId = made.share_id;
    fresh.replaceChildren(h("p", {}, "Anyone with this link can read the report without "
      + "signing in. Copy it now: it is not shown again."),
      h("p", {class: "copy"}, url, h("button", {type: "button", id: "share-copy",
        onclick: () => copy(url, said)}, "Copy"), said));
    url.focus();
    url.select();
    await load();
  };
  return {
    element: h("section", {id: "share-links", "aria-labelledby": "share-title"},
      h("h3", {id: "share-title"}, "Share links"),
      h("p", {}, h("button", {type: "button", id: "share-create",
                              onclick: () => create().catch(failed)}, "Create a share link"),
        " ", error),
      fresh, table),
    load,
  };
}

// The step whose runs write the report: an `agent` step writing the document's `result` with a
// role that has no JSON contract (the API's rule), or an `expand` step with a plan type that
// `writes_result`; null when the workflow writes none.
function reportStep(doc) {
  if (!doc?.steps?.length) return null;
  const entry = (s) => s.writes || s.id;
  const typed = doc.steps.find((s) => s.kind === "expand"
                                      && Object.values(s.types || {}).some((t) => t.writes_result));
  if (typed) return typed.id;
  const result = doc.result || entry(doc.steps[doc.steps.length - 1]);
  const step = doc.steps.find((s) => entry(s) === result && s.kind === "agent");
  return step && !doc.roles?.[step.role]?.output ? step.id : null;
}

// The report, once its step has finished a run: asked for only then, so that a task without
// one costs no failed request.
function reportPanel(task) {
  const frame = reportFrame();
  const cites = citationList(task.task_id);
  frame.element.addEventListener("load", () => cites.follow(frame.element));
  const shares = shareLinks(task.task_id);
  const error = h("span", {class: "error", "aria-live": "polite"});
  const pdf = h("button", {type: "button", id: "report-pdf"}, "Download PDF");
  pdf.addEventListener("click", async () => {
    error.textContent = "";
    pdf.disabled = true;
    pdf.textContent = "Preparing the PDF…";
    try {
      await downloadPdf(task.task_id);
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 401) throw e;
      error.textContent = e.message;  // 503: this server cannot render PDFs
    } finally {
      pdf.disabled = false;
      pdf.textContent = "Download PDF";
    }
  });
  const element = h("section", {id: "report", "aria-labelledby": "report-title", hidden: true},
    h("h2", {id: "report-title"}, "Report"), h("p", {}, pdf, " ", error), frame.element,
    cites.element, shares.element);
  let step;  // the report's step, once the workflow is read (null: it writes none)
  let written = 0;  // runs of the report's step finished when the report was last read
  let shown = null;  // the page shown
  return {
    element,
    async update(fresh) {
      if (step === undefined) {
        step = null;  // asked once, whatever the answer
        step = reportStep((await api(`/api/v1/workflows/${encodeURIComponent(fresh.workflow)}`))
          .document);
      }
      // its runs done, and once more when the task ends: a check, or the engine itself, may
      // write the report's last version after them
      const done = fresh.subtasks.filter((s) => s.key.split("#")[0] === step
                                                && s.status === "completed").length
        + (FINAL.has(fresh.status) ? 1 : 0);
      if (!step || done === written) return;
      const html = await reportPage(task.task_id);
      if (html === null) return;  // not stored yet: asked again on the next change
      written = done;
      if (html === shown) return;
      if (shown === null) await shares.load();
      shown = html;
      await cites.load();
      frame.show(html);
      element.hidden = false;
    },
  };
}

// ---- deleting the task -----------------------------------------------------------------------

function deleteButton(task) {
  const error = h("span", {class: "error", id: "delete-error", "aria-live": "polite"});
  const button = h("button", {type: "button", id: "delete-task", class: "danger"}, "Delete task");
  button.addEventListener("click", async () => {
    error.textContent = "";
    if (!confirm(`Delete "${task.description}" with its files, report and share links? `
                 + "This cannot be undone.")) return;
    try {
      // The page's refreshes wait while it is deleted; once it is, the view goes first (its
      // updates stop), so that nothing asks for the task again.
      await holding(() => api(`/api/v1/tasks/${task.task_id}`, {method: "DELETE"}).then(() => {
        show(h("p", {class: "muted"}, "Deleted."));
        navigate("/");
      }));
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 401) throw e;
      error.textContent = e.message;  // 409 while it runs: cancel it first
    }
  });
  return [button, " ", error];
}

// ---- the panels on the task page -------------------------------------------------------------

export function taskOwned(task) {
  const queue = queuePlace();
  const budget = budgetUse();
  const report = reportPanel(task);
  const top = h("div", {id: "task-owned"}, queue.element, budget.element, sourceList(task));
  const bottom = h("div", {class: "owned"}, report.element);
  const facts = document.getElementById("task-facts");
  if (facts) facts.after(top);
  else document.getElementById("view").append(top);
  document.getElementById("view").append(bottom);
  const actions = document.getElementById("download");  // the task's buttons, if it has them
  if (actions) actions.after(" ", ...deleteButton(task));
  else bottom.prepend(h("p", {}, ...deleteButton(task)));

  let current = task;
  const render = (fresh) => {
    current = fresh;
    queue.update(fresh);
    budget.update(fresh);
    return report.update(fresh);
  };
  const refresh = later(async () => {
    if (top.isConnected) await render(await api(`/api/v1/tasks/${task.task_id}`));
  }, 300);
  // A running task's time, by the second; a queued one's place, every 5 s (the queue moves
  // when the user's other tasks end, which this page does not follow).
  let ticks = 0;
  const clock = setInterval(() => {
    if (!top.isConnected) { stop(); return; }
    ticks += 1;
    if (current.status === "queued" && ticks % 5 === 0) refresh.soon();
    else if (!FINAL.has(current.status) && current.budget?.seconds) budget.update(current);
  }, 1000);
  const off = live.on((event) => {
    if (!top.isConnected) { stop(); return; }
    if (event.type === "caught_up") { refresh.soon(); return; }
    if (live.replaying || QUIET.has(event.type)) return;
    if (event.data?.task_id === task.task_id) refresh.soon();
  });
  const stop = () => { off(); clearInterval(clock); refresh.cancel(); };
  render(task).catch(failed);
}
