// A workflow task's conversation: its message log (`GET /api/v1/tasks/{id}/messages`), every
// hand-over between its agents and the person, in order: who handed what to whom. The user's
// own words (the request, an answer) sit on one side, the agents' on the other; a question to
// the user stands out. What was said is shown as it was said; an output or a loop's feedback
// names the blackboard revision read, and opens to its value (read from the task's state when
// first opened). New messages arrive as `message` events and are appended, once each.

import {api, h} from "./core.js";

const PAGE = 200;  // messages per request
const USER = "user";
const SAID = new Set(["request", "question", "answer", "delegation"]);  // carry their `content`

const shown = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));
const clock = (iso) => new Date(iso).toLocaleTimeString();

// What an output or a feedback read, said in a line.
function readLine(m) {
  if (m.entry) {
    return `read ${m.entry}${m.revision ? ` (revision ${m.revision})` : ""}`;
  }
  return `read ${m.sender}'s output`;
}

export function conversation(task) {
  const list = h("ol", {class: "conversation"});
  const empty = h("p", {class: "muted", id: "conversation-empty"}, "No messages yet.");
  const element = h("section", {id: "conversation", "aria-labelledby": "conversation-title"},
                    h("h2", {id: "conversation-title"}, "Conversation"), empty, list);
  const seen = new Set();  // message ids shown
  let loaded = false;
  const early = [];  // envelopes of events that came before the log was read
  let state = null;  // the task's state, read when an output is first opened

  // The value an output or a feedback read: its blackboard revision, or (when it names none)
  // the output of the run that wrote it.
  const valueOf = async (m) => {
    if (m.entry && m.revision) {
      const find = () => state?.entries?.[m.entry]?.find((r) => r.revision === m.revision);
      if (!find()) state = await api(`/api/v1/tasks/${task.task_id}/state`);
      const found = find();
      if (found) return shown(found.value);
    }
    if (m.source_subtask_id) {
      const sub = await api(`/api/v1/subtasks/${m.source_subtask_id}`);
      const out = sub.output || {};
      return shown(out.parsed ?? out.text ?? "");
    }
    return "(nothing to show)";
  };

  const read = (m) => {
    const body = h("pre", {class: "code"}, "Loading…");
    const box = h("details", {class: "read"}, h("summary", {}, readLine(m)), body);
    let asked = false;
    box.addEventListener("toggle", () => {
      if (!box.open || asked) return;
      asked = true;
      valueOf(m).then((text) => { body.textContent = text; }, (error) => {
        asked = false;  // opening it again tries again
        body.textContent = `Could not read it: ${error.message}`;
      });
    });
    return box;
  };

  const bubble = (m) => {
    const mine = m.sender === USER;
    return h("li", {class: "message", "data-message-id": m.id, "data-kind": m.kind,
                    "data-from": mine ? "user" : "agent"},
      h("p", {class: "who"},
        h("span", {class: "sender"}, m.sender), " → ", h("span", {class: "recipient"},
                                                          m.recipient), " ",
        h("span", {class: "badge kind"}, m.kind), " ",
        h("time", {class: "muted", datetime: m.timestamp}, clock(m.timestamp))),
      SAID.has(m.kind) ? h("p", {class: "says"}, m.content ?? "") : read(m));
  };

  // Append the envelopes not shown yet, in their order; nothing shown is drawn again.
  const append = (messages) => {
    const fresh = messages.filter((m) => m && !seen.has(m.id));
    for (const m of fresh) seen.add(m.id);
    if (!fresh.length) return;
    list.append(...fresh.map(bubble));
    empty.hidden = true;
  };

  return {
    element,
    // Every message so far, page by page; then those that arrived meanwhile.
    async load() {
      try {
        for (let offset = 0; ;) {
          const page = await api(`/api/v1/tasks/${task.task_id}/messages`
                                 + `?limit=${PAGE}&offset=${offset}`);
          append(page.messages);
          offset += page.messages.length;
          if (!page.messages.length || offset >= page.total) break;
        }
      } finally {
        loaded = true;
        append(early.splice(0));
      }
    },
    // A `message` event's envelopes.
    add(messages) {
      if (loaded) append(messages || []);
      else early.push(...(messages || []));
    },
  };
}
