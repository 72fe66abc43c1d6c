// The user's settings: where notifications go (webhooks, an email address) and how the latest
// deliveries went, and the files they uploaded for their tasks.

import {ApiError, age, api, failed, h, show} from "./core.js";

const EVENTS = [["task.completed", "A task completes"], ["task.failed", "A task fails"],
                ["task.budget_exceeded", "A task runs out of budget"],
                ["checkpoint.waiting", "A checkpoint waits for me"]];
const API = "/api/v1/notifications";

const errorOf = (field) => h("span", {class: "error", "data-for": field, "aria-live": "polite"});

// The API's refusal beside the fields it names (`details[].field`), else under the form.
function refused(form, error) {
  if (!(error instanceof ApiError) || error.status === 401) throw error;
  const details = Array.isArray(error.body?.details) ? error.body.details : [];
  let shown = false;
  for (const d of details) {
    const at = form.querySelector(`.error[data-for="${CSS.escape(String(d.field ?? ""))}"]`)
      || form.querySelector(`.error[data-for="${CSS.escape(String(d.field ?? "").split(".")[0])}"]`);
    if (at) { at.textContent = d.message || error.message; shown = true; }
  }
  if (!shown) form.querySelector(".error[data-for=form]").textContent = error.message;
}

const cleared = (form) => form.querySelectorAll(".error[data-for]").forEach((e) => {
  e.textContent = "";
});

// Which notifications: a checkbox each, all on unless `chosen` says otherwise.
function eventChoices(name, chosen = null) {
  return h("fieldset", {class: "events"}, h("legend", {}, "Notify when"),
    EVENTS.map(([value, label]) => h("label", {class: "inline"},
      h("input", {type: "checkbox", name, value, checked: !chosen || chosen.includes(value)}),
      ` ${label}`)),
    errorOf("events"));
}

const chosenEvents = (form, name) => [...form.querySelectorAll(`input[name="${name}"]:checked`)]
  .map((i) => i.value);

// ---- webhooks --------------------------------------------------------------------------------

function webhooksSection(deliveries) {
  const body = h("tbody");
  const table = h("table", {id: "webhooks", "aria-label": "Webhooks"},
    h("thead", {}, h("tr", {}, ["URL", "Notifies of", "On", ""].map((t) => h("th", {}, t)))),
    body);
  const said = h("p", {class: "muted", id: "webhook-said", "aria-live": "polite"});
  const form = h("form", {class: "wide", id: "webhook-form",
                          "aria-labelledby": "add-webhook-title", novalidate: true},
    h("p", {}, h("label", {for: "webhook-url"}, "URL"),
      h("input", {id: "webhook-url", type: "url", required: true, autocomplete: "off",
                  placeholder: "https://example.com/shoal"}), errorOf("url")),
    h("p", {}, h("label", {for: "webhook-secret"}, "Secret"),
      h("input", {id: "webhook-secret", type: "password", required: true, minlength: 16,
                  autocomplete: "new-password", "aria-describedby": "webhook-secret-help"}),
      h("small", {class: "muted", id: "webhook-secret-help"}, "At least 16 characters. It "
        + "signs every delivery (docs/guides/notifications.md) and is never shown again."),
      errorOf("secret")),
    eventChoices("webhook-events"),
    h("p", {class: "error", "data-for": "form", role: "alert"}),
    h("p", {}, h("button", {type: "submit", class: "primary"}, "Add webhook")));
  const load = async () => {
    const {webhooks} = await api(`${API}/webhooks`);
    body.replaceChildren(...webhooks.map(row));
    if (!webhooks.length) {
      body.append(h("tr", {}, h("td", {colspan: 4, class: "muted"}, "No webhooks yet.")));
    }
  };
  const act = async (work, message) => {
    said.textContent = "";
    try {
      await work();
      said.textContent = message || "";
    } catch (error) {
      if (!(error instanceof ApiError) || error.status === 401) throw error;
      said.textContent = error.message;
    }
    await Promise.all([load(), deliveries.load()]);
  };
  const row = (w) => h("tr", {"data-webhook-id": w.id},
    h("td", {class: "url"}, w.url),
    h("td", {class: "muted"}, w.events.join(", ")),
    h("td", {}, h("input", {type: "checkbox", role: "switch", checked: w.enabled,
      "aria-label": `Webhook ${w.url} on`,
      onchange: (event) => act(() => api(`${API}/webhooks/${w.id}`, {method: "PATCH",
        json: {enabled: event.target.checked}})).catch(failed)})),
    h("td", {class: "actions"},
      h("button", {type: "button", "aria-label": `Ping ${w.url}`, disabled: !w.enabled,
        onclick: () => act(() => api(`${API}/webhooks/${w.id}/ping`, {method: "POST"}),
                           `A ping is on its way to ${w.url}.`).catch(failed)}, "Ping"),
      " ",
      h("button", {type: "button", "aria-label": `Delete the webhook ${w.url}`,
        onclick: () => {
          if (!confirm(`Delete the webhook ${w.url} and its deliveries?`)) return;
          act(() => api(`${API}/webhooks/${w.id}`, {method: "DELETE"})).catch(failed);
        }}, "Delete")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    cleared(form);
    try {
      await api(`${API}/webhooks`, {method: "POST", json: {
        url: form.querySelector("#webhook-url").value.trim(),
        secret: form.querySelector("#webhook-secret").value,
        events: chosenEvents(form, "webhook-events")}});
    } catch (error) {
      refused(form, error);
      return;
    }
    form.reset();
    said.textContent = "Webhook added.";
    await load();
  });
  return {
    element: h("section", {id: "webhooks-section", "aria-labelledby": "webhooks-title"},
      h("h2", {id: "webhooks-title"}, "Webhooks"),
      h("p", {class: "muted"}, "Shoal POSTs each notification you pick, signed with the "
        + "webhook's secret."),
      table, said, h("h3", {id: "add-webhook-title"}, "Add a webhook"), form),
    load,
  };
}

// ---- email -----------------------------------------------------------------------------------

function emailSection() {
  const events = h("div", {});
  const remove = h("button", {type: "button", id: "email-remove", hidden: true}, "Stop emails");
  const said = h("span", {class: "muted", "aria-live": "polite"});
  const form = h("form", {class: "wide", id: "email-form", "aria-label": "Email notifications",
                          novalidate: true},
    h("p", {}, h("label", {for: "email-address"}, "Address"),
      h("input", {id: "email-address", type: "email", autocomplete: "email",
                  placeholder: "ada@example.com"}), errorOf("address")),
    events,
    h("p", {class: "error", "data-for": "form", role: "alert"}),
    h("p", {}, h("button", {type: "submit", class: "primary"}, "Save"), " ", remove, " ", said));
  const address = form.querySelector("#email-address");
  const fill = (email) => {
    address.value = email.address || "";
    events.replaceChildren(eventChoices("email-events", email.address ? email.events : null));
    remove.hidden = !email.address;
  };
  const load = async () => fill(await api(`${API}/email`));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    cleared(form);
    said.textContent = "";
    try {
      fill(await api(`${API}/email`, {method: "PUT", json: {
        address: address.value.trim(), events: chosenEvents(form, "email-events")}}));
    } catch (error) {
      refused(form, error);  // 409: this server sends no email
      return;
    }
    said.textContent = "Saved.";
  });
  remove.addEventListener("click", async () => {
    cleared(form);
    await api(`${API}/email`, {method: "DELETE"}).catch((error) => refused(form, error));
    await load();
    said.textContent = "No more emails.";
  });
  return {
    element: h("section", {id: "email-section", "aria-labelledby": "email-title"},
      h("h2", {id: "email-title"}, "Email"), form),
    load,
  };
}

// ---- deliveries ------------------------------------------------------------------------------

function deliveriesSection() {
  const body = h("tbody");
  const load = async () => {
    const {deliveries} = await api(`${API}/deliveries?limit=20`);
    body.replaceChildren(...deliveries.map((d) => h("tr", {"data-delivery-id": d.id},
      h("td", {title: d.created_at}, age(d.created_at)),
      h("td", {}, d.type),
      h("td", {class: "url"}, d.target),
      h("td", {}, h("span", {class: "badge", "data-status": d.status}, d.status)),
      h("td", {}, String(d.attempts)),
      h("td", {class: "muted"}, [d.last_status_code ? `HTTP ${d.last_status_code}` : "",
                                 d.last_error || ""].filter(Boolean).join(": ") || "—"))));
    if (!deliveries.length) {
      body.append(h("tr", {}, h("td", {colspan: 6, class: "muted"}, "Nothing sent yet.")));
    }
  };
  return {
    element: h("section", {id: "deliveries-section", "aria-labelledby": "deliveries-title"},
      h("h2", {id: "deliveries-title"}, "Recent deliveries",
        h("button", {type: "button", class: "aside", id: "deliveries-refresh",
                     onclick: () => load().catch(failed)}, "Refresh")),
      h("table", {id: "deliveries", "aria-label": "Recent deliveries"},
        h("thead", {}, h("tr", {}, ["Created", "Notification", "To", "Status", "Tries",
                                    "Last answer"].map((t) => h("th", {}, t)))), body)),
    load,
  };
}

// ---- uploads ---------------------------------------------------------------------------------

const size = (n) => (n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} kB`
  : `${(n / 1048576).toFixed(1)} MB`);

function uploadsSection() {
  const body = h("tbody");
  const said = h("p", {class: "error", id: "uploads-said", "aria-live": "polite"});
  const load = async () => {
    const {uploads} = await api("/api/v1/uploads");
    body.replaceChildren(...uploads.map((u) => h("tr", {"data-upload-id": u.upload_id},
      h("td", {}, u.name), h("td", {}, u.kind), h("td", {}, size(u.size)),
      h("td", {class: "muted", title: u.created_at}, age(u.created_at)),
      h("td", {}, h("button", {type: "button", "aria-label": `Delete ${u.name}`,
        onclick: () => drop(u).catch(failed)}, "Delete")))));
    if (!uploads.length) {
      body.append(h("tr", {}, h("td", {colspan: 5, class: "muted"}, "No uploads. Attach "
        + "files to a task when you submit it.")));
    }
  };
  const drop = async (u) => {
    said.textContent = "";
    if (!confirm(`Delete ${u.name}?`)) return;
    try {
      await api(`/api/v1/uploads/${u.upload_id}`, {method: "DELETE"});
    } catch (error) {
      if (!(error instanceof ApiError) || error.status === 401) throw error;
      said.textContent = error.message;  // 409: a task reads it
    }
    await load();
  };
  return {
    element: h("section", {id: "uploads-section", "aria-labelledby": "uploads-title"},
      h("h2", {id: "uploads-title"}, "Your uploads"),
      h("table", {id: "uploads", "aria-label": "Your uploads"},
        h("thead", {}, h("tr", {}, ["Name", "Kind", "Size", "Uploaded", ""].map((t) =>
          h("th", {}, t)))), body), said),
    load,
  };
}

export async function settingsView() {
  const deliveries = deliveriesSection();
  const webhooks = webhooksSection(deliveries);
  const email = emailSection();
  const uploads = uploadsSection();
  show(h("h1", {}, "Settings"),
       h("div", {class: "settings"}, webhooks.element, email.element, deliveries.element,
         uploads.element));
  await Promise.all([webhooks.load(), email.load(), deliveries.load(), uploads.load()]);
}
