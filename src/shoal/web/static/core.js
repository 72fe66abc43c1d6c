// The dashboard's core: elements, the session, the API, the one live socket, and the view
// slot every page renders into. Events arrive once: after a drop the socket resumes with
// `since` (the last sequence number seen), and an event at or below it is ignored.

const view = document.getElementById("view");

export function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "style") el.style.cssText = value;  // not an attribute: the CSP allows it
    else if (value === true) el.setAttribute(key, "");
    else if (value !== false && value !== null && value !== undefined) el.setAttribute(key, value);
  }
  for (const kid of kids.flat()) {
    if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// Replace `container`'s children with `kids`, keeping the keyboard's focus: when a control
// inside it had the focus, the new control that stands for the same thing (`focusKey`) gets
// it back, so a live redraw never drops a keyboard user's place.
export function replaceKeepingFocus(container, ...kids) {
  const had = document.activeElement;
  const key = had && had !== container && container.contains(had) ? focusKey(had) : null;
  container.replaceChildren(...kids);
  if (key) container.querySelector(key)?.focus();
}

// What names a control across redraws: its id, else the first of these attributes it has.
const FOCUS_KEYS = ["data-subtask-id", "data-path", "data-worker-id", "href", "aria-label"];

function focusKey(el) {
  if (el.id) return `#${CSS.escape(el.id)}`;
  const name = FOCUS_KEYS.find((key) => el.hasAttribute(key));
  return name ? `${el.tagName.toLowerCase()}[${name}="${CSS.escape(el.getAttribute(name))}"]`
    : null;
}

export function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

// ---- the session: tokens in sessionStorage, refreshed before they expire ---------------------

export const session = {
  get access() { return sessionStorage.getItem("shoal.access"); },
  get refresh() { return sessionStorage.getItem("shoal.refresh"); },
  timer: null,
  user: null,  // `GET /api/v1/users/me`, once read
  save(pair) {
    sessionStorage.setItem("shoal.access", pair.access_token);
    sessionStorage.setItem("shoal.refresh", pair.refresh_token);
    this.schedule(pair.expires_in);
  },
  clear() {
    sessionStorage.removeItem("shoal.access");
    sessionStorage.removeItem("shoal.refresh");
    clearTimeout(this.timer);
    this.user = null;
  },
  schedule(seconds) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.renew(), Math.max(5, seconds - 60) * 1000);
  },
  renewing: null,
  // One renewal at a time, which every caller meanwhile shares: a refresh token works once,
  // and the server takes a second use of one for a stolen copy and ends the sign-in.
  renew() {
    this.renewing ??= this.trade().finally(() => { this.renewing = null; });
    return this.renewing;
  },
  // A fresh access token for a request sent with `sent` that was refused (401): true once
  // there is one to retry with. A renewal that ended while that request was on its way has
  // brought one already (renewing again would spend a refresh token for nothing, as a 401
  // answered late under load once did); else this renews, or shares the renewal under way.
  renewAfter(sent) {
    return this.access && this.access !== sent ? Promise.resolve(true) : this.renew();
  },
  async trade() {
    if (!this.refresh) return false;
    let resp;
    try {
      resp = await fetch("/api/v1/auth/refresh", {
        method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({refresh_token: this.refresh})});
    } catch (error) {
      this.schedule(70);  // the control plane is away (a restart): try again in 10 s
      return false;
    }
    if (!resp.ok) { ended(); return false; }
    this.save(await resp.json());
    return true;
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// A signed-in request: one renewal and retry on a 401, an `ApiError` (with the API's body) on
// any other failure.
async function request(path, options = {}, retried = false) {
  const sent = session.access;
  if (!sent) throw new ApiError(401, {message: "Not signed in."});
  const headers = {...(options.headers || {}), Authorization: `Bearer ${sent}`};
  if (options.json !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method: options.method || "GET", headers,
    body: options.json !== undefined ? JSON.stringify(options.json) : undefined});
  if (resp.status === 401 && !retried && await session.renewAfter(sent)) {
    return request(path, options, true);
  }
  if (!resp.ok) {
    const body = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
    if (resp.status === 401) ended();
    throw new ApiError(resp.status, body);
  }
  return resp;
}

export async function api(path, options = {}) {
  const resp = await request(path, options);
  if (resp.status === 204) return null;  // done, nothing to say
  return resp.headers.get("content-type")?.includes("json") ? resp.json() : null;
}

// A file from the API (a download) as a Blob.
export async function fetchBlob(path) {
  return (await request(path)).blob();
}

// ---- live events: one socket, resumed with `since` -------------------------------------------

export const live = {
  socket: null, task: null, since: null, waiting: false, listeners: new Set(), retry: 500,
  wanted: false, replaying: false,
  // Follow every event of the user's from now on (`task` null), or one task's from its first
  // event (`replay`): its history, then live.
  follow(task, {replay = false} = {}) {
    this.wanted = true;
    this.task = task;
    if (replay) this.since = 0;
    if (!this.socket) return this.connect();
    if (this.socket.readyState === WebSocket.OPEN) this.subscribe(replay);
  },
  stop() {
    this.wanted = false;
    this.since = null;
    this.socket?.close();
    this.socket = null;
  },
  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = this.socket = new WebSocket(`${scheme}://${location.host}/ws`);
    socket.onopen = () => {
      socket.send(JSON.stringify({type: "auth", token: session.access}));
      this.subscribe(this.since !== null);
    };
    socket.onmessage = (message) => this.receive(JSON.parse(message.data));
    socket.onclose = () => {
      if (this.socket !== socket) return;
      this.socket = null;
      status("Reconnecting…");
      if (this.wanted) setTimeout(() => this.wanted && !this.socket && this.connect(), this.retry);
      this.retry = Math.min(this.retry * 2, 5000);
    };
  },
  subscribe(resume) {
    // A task's events, or all; and every task's checkpoints, for the badge on every page.
    const message = {type: "subscribe", batch: true,
                     any_task_types: ["checkpoint_ready", "checkpoint_decided"]};
    if (this.task) message.task_id = this.task;
    if (resume) message.since = this.since;  // the server replays what came after it
    this.waiting = resume;  // until `subscribed`, events are the old subscription's
    this.replaying = resume;  // until `caught_up`, events are the past's
    this.socket.send(JSON.stringify(message));
  },
  receive(item) {
    if (item.type === "batch") {  // events that queued up during a burst, in order
      for (const one of item.items) this.receive(one);
      return;
    }
    if (item.type === "subscribed" || item.type === "caught_up") {
      if (item.type === "subscribed") this.waiting = false;
      else this.replaying = false;
      this.retry = 500;
      status(this.replaying ? "Catching up…" : "Live");
      for (const listener of this.listeners) listener(item);
      return;
    }
    if (item.type === "pong" || item.type === "error" || item.type === "unsubscribed") return;
    if (this.waiting) return;
    if (item.seq) {
      if (this.since !== null && item.seq <= this.since) return;  // seen before a drop
      this.since = item.seq;
    }
    for (const listener of this.listeners) listener(item);
  },
  on(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  },
};

export function status(text) { document.getElementById("live").textContent = text; }

// `work` run once, `ms` after the last of a burst of calls to `soon`; its failure is shown,
// not thrown into the void, and `cancel` drops a run not yet started (the view went away).
// While `holding`, a run that comes due waits (then runs, unless cancelled meanwhile).
let holds = 0;
const deferred = new Set();
const running = new Set();  // runs under way: `holding` lets them end first

export function later(work, ms) {
  let timer = null;
  const fire = () => {
    if (holds) {
      deferred.add(fire);
      return;
    }
    const run = work().catch(failed).finally(() => running.delete(run));
    running.add(run);
  };
  return {
    soon() {
      clearTimeout(timer);
      deferred.delete(fire);
      timer = setTimeout(fire, ms);
    },
    cancel() {
      clearTimeout(timer);
      deferred.delete(fire);
    },
  };
}

// What `start()` gives, started once the `later` runs under way have ended and with none
// starting until it settles: a deletion holds the page's refreshes, so that nothing reads
// again what is going away (its `then` leaves the view first).
export async function holding(start) {
  holds += 1;
  try {
    await Promise.allSettled([...running]);
    return await start();
  } finally {
    holds -= 1;
    if (!holds) {
      const due = [...deferred];
      deferred.clear();
      for (const fire of due) fire();
    }
  }
}

export function failed(error) {
  if (error instanceof ApiError && error.status === 401) return;  // the session ended: shown
  status(`Could not refresh: ${error.message}`);
  console.error(`Could not refresh: ${error.message}`);  // for whoever debugs (and the tests)
}

// ---- views -----------------------------------------------------------------------------------

let leave = () => {};  // what the current view stops when another replaces it

export function show(...kids) {
  leave();
  leave = () => {};
  view.replaceChildren(...kids);
}

// What the current view stops when another replaces it (its listeners, its timers).
export function onLeave(stop) { leave = stop; }

// Another page, without a reload: `app.js` routes on `popstate`.
export function navigate(path) {
  history.pushState(null, "", path);
  dispatchEvent(new PopStateEvent("popstate"));
}

export function ended() {
  session.clear();
  live.stop();
  show(h("section", {class: "card"}, h("h1", {}, "Your session has ended"),
    h("p", {}, "Sign in again to go on; nothing you submitted is lost."),
    h("a", {href: "/login", "data-link": true}, "Sign in")));
}

export function notFound(what) {
  show(h("section", {}, h("h1", {}, "Not found"),
    h("p", {class: "muted"}, `${what} does not exist, or is not yours.`),
    h("a", {href: "/", "data-link": true}, "Back to your tasks")));
}
