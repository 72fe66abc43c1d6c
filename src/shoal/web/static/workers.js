// The workers: online state, tools with their versions, slots, and resources with sparklines
// of the last heartbeats, live; a worker's current attempt and recent history (at your tasks;
// an admin sees all); and, for an admin, the worker tokens: create one (its secret shown
// once), list them, revoke one.

import {
  age, api, failed, h, later, live, onLeave, replaceKeepingFocus, session, show,
} from "./core.js";

const percent = (v) => (typeof v === "number" ? `${Math.round(v)} %` : "—");
const SVG = "http://www.w3.org/2000/svg";

// A sparkline of the last heartbeats' readings (0–100 %), and the latest as a number.
function reading(samples, key, now) {
  const values = samples.map((x) => Math.min(100, x[key]));
  const cell = h("td", {"data-resource": key}, percent(now));
  if (values.length < 2) return cell;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 60 20");
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${key.replace("_percent", "")} over the last ` +
                   `${values.length} heartbeats, ${Math.round(Math.min(...values))} to ` +
                   `${Math.round(Math.max(...values))} %`);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", values.map((v, i) =>
    `${(i * 60 / (values.length - 1)).toFixed(1)},${(19 - v * 0.18).toFixed(1)}`).join(" "));
  svg.append(line);
  cell.prepend(svg, " ");
  return cell;
}

async function workerDetail(id, into) {
  const w = await api(`/api/v1/workers/${id}`);
  const taskLink = (a) => h("a", {href: `/tasks/${a.task_id}`, "data-link": true},
                            a.subtask_name);
  const info = Object.entries(w.system_info || {}).filter(([, v]) => typeof v !== "object");
  into.replaceChildren(h("h2", {}, w.machine_name),
    info.length ? h("p", {class: "muted"}, info.map(([k, v]) => `${k}: ${v}`).join(" · ")) : "",
    h("h3", {}, "Working on"),
    w.current ? h("p", {}, taskLink(w.current), h("span", {class: "muted"},
                                                  ` since ${age(w.current.started_at)}`))
      : h("p", {class: "muted"}, "Nothing of yours right now."),
    h("h3", {}, "Recent attempts"),
    w.task_history.length ? h("ol", {class: "attempts", id: "worker-history"},
      w.task_history.map((a) => h("li", {},
        h("span", {class: "badge", "data-status": a.status}, a.status), " ", taskLink(a),
        a.duration_seconds !== null ? h("span", {class: "muted"}, ` · ${a.duration_seconds} s`)
          : "")))
      : h("p", {class: "muted"}, "None at your tasks yet."));
}

function tokensSection() {
  const list = h("tbody");
  const shown = h("output", {id: "new-token", class: "token", "aria-live": "polite"});
  const name = h("input", {id: "token-name", name: "name", required: true, maxlength: 100});
  const error = h("span", {class: "error", "aria-live": "polite"});
  const load = async () => {
    const tokens = await api("/api/v1/workers/tokens");
    list.replaceChildren(...tokens.map((t) => h("tr", {"data-token-id": t.token_id},
      h("td", {}, t.name), h("td", {class: "muted"}, age(t.created_at)),
      h("td", {class: "muted"}, t.last_used_at ? age(t.last_used_at) : "never"),
      h("td", {}, t.revoked_at ? h("span", {class: "muted"}, "revoked")
        : h("button", {type: "button", "aria-label": `Revoke ${t.name}`, onclick: async () => {
          if (!confirm(`Revoke "${t.name}"? Workers using it are refused from now on.`)) return;
          await api(`/api/v1/workers/tokens/${t.token_id}`, {method: "DELETE"}).catch(failed);
          await load();
        }}, "Revoke")))));
  };
  const form = h("form", {class: "filters", "aria-label": "New worker token"},
    h("label", {for: "token-name"}, "Name"), name,
    h("button", {type: "submit"}, "Create token"), error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    try {
      const made = await api("/api/v1/workers/tokens", {method: "POST",
                                                        json: {name: name.value}});
      shown.replaceChildren(h("p", {}, "Copy it now: it is not shown again."),
        h("code", {}, `shoal worker --server ${location.origin} --token ${made.token}`));
      name.value = "";
      await load();
    } catch (e) {
      error.textContent = e.message;
    }
  });
  return {
    element: h("section", {"aria-label": "Worker tokens"}, h("h2", {}, "Worker tokens"), form,
      shown, h("table", {"aria-label": "Worker tokens"}, h("thead", {}, h("tr", {},
        ["Name", "Created", "Last used", ""].map((t) => h("th", {}, t)))), list)),
    load,
  };
}

export async function workersView() {
  const body = h("tbody");
  const detail = h("section", {id: "worker-detail", "aria-live": "polite"});
  let open = null;  // the worker whose detail is shown
  const tokens = session.user?.is_admin ? tokensSection() : null;
  show(h("h1", {}, "Workers"), h("table", {"aria-label": "Workers"},
    h("thead", {}, h("tr", {}, ["Worker", "Status", "Tools", "Slots", "CPU", "Memory", "Disk",
                                "Last heartbeat"].map((t) => h("th", {}, t)))), body),
    detail, tokens ? tokens.element : "");
  const load = async () => {
    const {workers} = await api("/api/v1/workers");
    replaceKeepingFocus(body, ...workers.map((w) => h("tr", {"data-worker-id": w.worker_id},
      h("td", {}, h("button", {type: "button", class: "link", "aria-expanded": open === w.worker_id,
        onclick: () => { open = w.worker_id; workerDetail(open, detail).catch(failed); }},
        w.machine_name)),
      h("td", {}, h("span", {class: "badge", "data-status": w.status}, w.status)),
      h("td", {}, w.tool_details.map((t) => `${t.name}${t.version ? ` ${t.version}` : ""}`)
        .join(", ")),
      h("td", {}, String(w.slots)),
      reading(w.recent, "cpu_percent", w.resources.cpu_percent),
      reading(w.recent, "memory_percent", w.resources.memory_percent),
      reading(w.recent, "disk_percent", w.resources.disk_percent),
      h("td", {class: "muted"}, w.last_heartbeat ? age(w.last_heartbeat) : "—"))));
    if (!workers.length) body.append(h("tr", {}, h("td", {colspan: 8, class: "muted"},
      "No workers yet. Start one with `shoal worker --server … --token …`.")));
    if (open) await workerDetail(open, detail);
  };
  const reload = later(load, 50);  // once for a burst of updates
  const off = live.on((event) => {
    if (event.type === "worker_update" || event.type === "subscribed") reload.soon();
  });
  onLeave(() => { off(); reload.cancel(); });
  await Promise.all([load(), tokens?.load()]);
}
