// What a report's citations cite, as Shoal's citation check found it: below the report, each
// source by its number — the passage (where it is, in the user's own terms) with the words the
// sentence rests on highlighted, or the SQL and the rows it returned. A citation marker [n] in
// the report opens its source here. `citationList(taskId)` returns the element and `load()`,
// `follow(frame)` (make the markers of the shown report open their sources).

import {api, h} from "./core.js";

const MARKER = /\[(\d+(?:\s*,\s*\d+)*)\]/g;

// `text` with the first place `quote` occurs (white space and case aside) in a <mark>.
function highlighted(text, quote) {
  if (!quote) return [text];
  const words = quote.trim().split(/\s+/).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const found = words.length ? new RegExp(words.join("\\s+"), "i").exec(text) : null;
  if (!found) return [text];
  return [text.slice(0, found.index), h("mark", {}, found[0]),
          text.slice(found.index + found[0].length)];
}

function rowsTable(rows) {
  if (!rows?.length) return h("p", {class: "muted"}, "No rows.");
  const columns = Object.keys(rows[0]);
  return h("table", {class: "rows"},
    h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", {scope: "col"}, c)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...columns.map((c) => h("td", {},
      String(r[c] ?? "")))))));
}

function sourceItem(source) {
  const body = source.sql
    ? [h("pre", {}, h("code", {}, source.sql)), rowsTable(source.rows)]
    : [h("blockquote", {}, ...highlighted(source.text || "", source.quote))];
  return h("li", {id: `cite-${source.number}`, tabindex: "-1"},
    h("details", {}, h("summary", {}, `[${source.number}] `,
                       source.sql ? "SQL over the data" : source.label || "a passage"),
      ...body));
}

export function citationList(taskId) {
  const list = h("ol", {class: "citations"});
  const element = h("section", {id: "citations", "aria-labelledby": "citations-title",
                                hidden: true},
    h("h3", {id: "citations-title"}, "What the citations cite"),
    h("p", {class: "muted"}, "As Shoal's citation check found them (in code, not by a model). "
      + "A marker in the report opens its source here."), list);
  const open = (number) => {
    const item = list.querySelector(`#cite-${number}`);
    if (!item) return;
    item.querySelector("details").open = true;
    item.scrollIntoView({block: "center"});
    item.focus();
  };
  return {
    element,
    async load() {
      const found = await api(`/api/v1/tasks/${taskId}/citations`);
      list.replaceChildren(...found.sources.map(sourceItem));
      element.hidden = !found.sources.length;
    },
    // The report's markers become buttons that open their sources (the frame runs no script:
    // the dashboard listens for it).
    follow(frame) {
      const inner = frame.contentDocument;
      if (!inner?.body) return;
      const walker = inner.createTreeWalker(inner.body, NodeFilter.SHOW_TEXT);
      const texts = [];
      while (walker.nextNode()) {
        if (MARKER.test(walker.currentNode.nodeValue)) texts.push(walker.currentNode);
        MARKER.lastIndex = 0;
      }
      for (const node of texts) {
        const parts = [];
        let at = 0;
        for (const match of node.nodeValue.matchAll(MARKER)) {
          parts.push(inner.createTextNode(node.nodeValue.slice(at, match.index)));
          const link = inner.createElement("a");
          link.href = `#cite-${match[1].split(",")[0].trim()}`;
          link.dataset.cite = match[1].split(",")[0].trim();
          link.textContent = match[0];
          parts.push(link);
          at = match.index + match[0].length;
        }
        parts.push(inner.createTextNode(node.nodeValue.slice(at)));
        node.replaceWith(...parts);
      }
      inner.addEventListener("click", (event) => {
        const link = event.target.closest?.("a[data-cite]");
        if (!link) return;
        event.preventDefault();
        open(link.dataset.cite);
      });
    },
  };
}
