// The workers: online state, tools, slots and resources, live.

import {age, api, h, later, live, onLeave, show} from "./core.js";

export async function workersView() {
  const body = h("tbody");
  show(h("h1", {}, "Workers"), h("table", {"aria-label": "Workers"},
    h("thead", {}, h("tr", {}, ["Worker", "Status", "Tools", "Slots", "CPU", "Memory", "Disk",
                                "Last heartbeat"].map((t) => h("th", {}, t)))), body));
  const percent = (v) => (typeof v === "number" ? `${Math.round(v)} %` : "—");
  const load = async () => {
    const {workers} = await api("/api/v1/workers");
    body.replaceChildren(...workers.map((w) => h("tr", {"data-worker-id": w.worker_id},
      h("td", {}, w.machine_name),
      h("td", {}, h("span", {class: "badge", "data-status": w.status}, w.status)),
      h("td", {}, w.tools.join(", ")),
      h("td", {}, String(w.slots)),
      h("td", {}, percent(w.resources.cpu_percent)),
      h("td", {}, percent(w.resources.memory_percent)),
      h("td", {}, percent(w.resources.disk_percent)),
      h("td", {class: "muted"}, w.last_heartbeat ? age(w.last_heartbeat) : "—"))));
    if (!workers.length) body.append(h("tr", {}, h("td", {colspan: 8, class: "muted"},
      "No workers yet. Start one with `shoal worker --server … --token …`.")));
  };
  const reload = later(load, 50);  // once for a burst of updates
  const off = live.on((event) => {
    if (event.type === "worker_update" || event.type === "subscribed") reload.soon();
  });
  onLeave(() => { off(); reload.cancel(); });
  await load();
}
