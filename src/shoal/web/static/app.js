// Shoal's dashboard: one page, one WebSocket, no build step (ADR 0032). This module routes;
// each view is its own module: sign-in, tasks, a task's graph with a subtask drawer, a new
// task, the workers, the workflows, the user's settings; and on every page, the open
// checkpoints' badge and dialog.

import {ApiError, h, live, navigate, notFound, session, show} from "./core.js";
import {checkpoints} from "./checkpoints.js";
import {loginView, whoami} from "./signin.js";
import {settingsView} from "./settings.js";
import {submitView} from "./submit.js";
import {taskView} from "./task.js";
import {tasksView} from "./tasks.js";
import {workersView} from "./workers.js";
import {workflowsView} from "./workflows.js";

let decisions = null;  // the checkpoints' badge and dialog, once the page has started

async function route() {
  const path = location.pathname;
  if (!session.access) {
    decisions?.close();
    return loginView(path === "/login" ? "" : "Sign in to see this page.");
  }
  if (path === "/login") { history.replaceState(null, "", "/"); return route(); }
  document.getElementById("signout").hidden = false;
  const match = path.match(/^\/tasks\/([^/]+)$/);
  decisions?.viewing(match ? decodeURIComponent(match[1]) : null);
  try {
    if (match) return await taskView(decodeURIComponent(match[1]));
    live.follow(null);
    if (path === "/") return await tasksView();
    if (path === "/workers") return await workersView();
    if (path === "/new") return await submitView();
    if (path === "/workflows") return await workflowsView();
    if (path === "/settings") return await settingsView();
    return notFound("This page");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return;
    show(h("p", {class: "error", role: "alert"}, `Something went wrong: ${error.message}`));
  }
}

async function start() {
  const theme = localStorage.getItem("shoal.theme")
    || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  document.documentElement.dataset.theme = theme;
  document.getElementById("theme").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    localStorage.setItem("shoal.theme", next);
  });
  document.getElementById("signout").addEventListener("click", () => {
    session.clear();
    navigate("/login");
  });
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-link]");
    if (link && !event.ctrlKey && !event.metaKey && !event.shiftKey) {
      event.preventDefault();
      navigate(link.getAttribute("href"));
    }
  });
  addEventListener("popstate", route);
  decisions = checkpoints(document.getElementById("pending"));
  const params = new URLSearchParams(location.search);
  const oneTime = params.get("token");
  if (oneTime) {  // the one-time link printed by `shoal up`
    history.replaceState(null, "", location.pathname);
    const resp = await fetch("/api/v1/auth/exchange", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({token: oneTime})});
    if (resp.ok) session.save(await resp.json());
    else return loginView((await resp.json()).message);
  } else if (session.refresh) {
    await session.renew();  // a reload: a fresh access token, and its refresh scheduled
  }
  if (session.access && !await whoami()) return;
  await route();
}

start();
