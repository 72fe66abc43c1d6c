// Signing in: the login form, and who is signed in.

import {api, h, live, navigate, session, show} from "./core.js";

export function loginView(message) {
  live.stop();
  const error = h("p", {class: "error", role: "alert"}, message || "");
  const form = h("form", {class: "card", "aria-labelledby": "login-title"},
    h("h1", {id: "login-title"}, "Sign in to Shoal"),
    h("label", {for: "username"}, "Username"),
    h("input", {id: "username", name: "username", autocomplete: "username", required: true}),
    h("label", {for: "password"}, "Password"),
    h("input", {id: "password", name: "password", type: "password",
                autocomplete: "current-password", required: true}),
    error,
    h("button", {class: "primary", type: "submit"}, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const resp = await fetch("/api/v1/auth/login", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({username: form.username.value, password: form.password.value})});
    const body = await resp.json();
    if (!resp.ok) { error.textContent = body.message || "Could not sign in."; return; }
    session.save(body);
    await whoami();
    const next = new URLSearchParams(location.search).get("next");
    navigate(next && next.startsWith("/") ? next : "/");
  });
  show(form);
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  form.username.focus();
}

export async function whoami() {
  try {
    const me = await api("/api/v1/users/me");
    session.user = me;  // who is signed in: an admin also manages worker tokens
    document.getElementById("who").textContent = `Signed in as ${me.username}`;
    return true;
  } catch (error) {
    return false;  // the session ended (shown), or the control plane is away
  }
}
