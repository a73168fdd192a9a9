// The run page's one script: it follows a run's events (steps, status, think
// tokens) without reloading, and sends the page's forms with fetch so that a
// decision's one-line result shows in place. Every piece of markup it inserts
// was made (and escaped) by the server; text it writes itself goes in as text.
"use strict";

function said(ok, line) {
  const box = document.getElementById("said");
  if (!box) return;
  box.hidden = false;
  box.className = "said " + (ok ? "ok" : "error");
  box.textContent = line;
}

function markup(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

async function send(form, submitter) {
  const body = new URLSearchParams(new FormData(form, submitter));
  const buttons = form.querySelectorAll("button");
  buttons.forEach((b) => (b.disabled = true));
  try {
    const answer = await fetch(form.getAttribute("action"), {
      method: "POST",
      body: body,
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    const type = answer.headers.get("Content-Type") || "";
    if (!type.startsWith("application/json")) {
      said(false, (await answer.text()).trim() || "the page refused: HTTP " + answer.status);
      return;
    }
    const done = await answer.json();
    if (done.location) {
      sessionStorage.setItem("said", JSON.stringify([done.ok, done.line]));
      window.location.assign(done.location);
      return;
    }
    said(done.ok, done.line);
    if (done.ok) form.reset();
  } catch (error) {
    said(false, "could not reach the run page: " + error);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

function bindForms(root) {
  root.querySelectorAll("form.act").forEach((form) => {
    if (form.dataset.bound) return;
    form.dataset.bound = "1";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      send(form, event.submitter);
    });
  });
}

function follow(body) {
  const steps = document.getElementById("steps");
  const status = document.getElementById("status");
  const live = document.getElementById("live");
  const tokens = live ? live.querySelector(".tokens") : null;
  let since = Number(body.dataset.since || "0");
  const url = body.dataset.events + "?since=" + since + "&turn=" + (body.dataset.turn || "1");
  const events = new EventSource(url);
  body.dataset.following = "yes";

  events.addEventListener("step", (event) => {
    const fragment = markup(event.data);
    const item = fragment.querySelector("li.step");
    if (!item || !steps) return;
    const old = document.getElementById(item.id);
    if (old) old.remove();
    const none = steps.querySelector("li.none");
    if (none) none.remove();
    steps.appendChild(fragment);
    since = Math.max(since, Number(item.dataset.step));
    body.dataset.since = String(since);
    if (tokens) {
      tokens.textContent = "";
      live.hidden = true;
    }
  });
  events.addEventListener("status", (event) => {
    if (!status) return;
    status.replaceChildren(markup(event.data));
    bindForms(status);
  });
  events.addEventListener("token", (event) => {
    if (!tokens) return;
    const token = JSON.parse(event.data);
    if (token.kind === "think_started") tokens.textContent = "";
    if (token.kind === "token") {
      live.hidden = false;
      tokens.appendChild(document.createTextNode(token.text));
    }
  });
  events.addEventListener("said", (event) => said(false, event.data));
  events.addEventListener("end", () => {
    events.close();
    body.dataset.following = "ended";
    document.querySelectorAll("form.cancel").forEach((form) => form.remove());
    const more = document.querySelector("details.more");
    if (more) more.open = true;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const kept = sessionStorage.getItem("said");
  if (kept) {
    sessionStorage.removeItem("said");
    const [ok, line] = JSON.parse(kept);
    said(ok, line);
  }
  bindForms(document);
  if (document.body.dataset.events) follow(document.body);
});
