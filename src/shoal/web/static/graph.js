// The task graph: its layout and edges (pure functions over the subtasks shown), its critical
// path, and the view that draws it with pan and zoom.
//
// The layout is layered, by hand: a subtask sits one layer after the deepest of what it waits
// for; a few barycenter sweeps order each layer to cross few edges; a crowded layer wraps into
// columns, and a long graph into bands, so that it stays readable in the view when fitted.
// Each step is linear in the nodes and edges (but the sorts): a redraw stays cheap at 500.
// A layer whose nodes are all of one wave of a typed plan is headed by that wave's name.

import {h, replaceKeepingFocus} from "./core.js";

// Sizes at zoom 1, in CSS pixels. The view sets every node's size to these.
export const NODE = {width: 208, height: 76};
const LAYER_GAP = 72;   // between layers: room for the edges' curves
const COLUMN_GAP = 16;  // between the columns a crowded layer wraps into
const ROW_GAP = 14;
const BAND_GAP = 56;    // between the bands a long graph wraps into
const MIN_ROWS = 16;    // a layer of at most this many nodes is one column
const SWEEPS = 4;       // down, up, down, up: more rarely uncrosses anything in our graphs
const READABLE = 0.6;   // a zoom at which a node's text can still be read
const MAX_BANDS = 100;
const PAD = 16;         // around the graph when it is fitted
const HEADING = 24;     // above each band, when a layer has a heading: room for it
export const VIEW = {width: 1000, height: 560};  // a view's size, when it is not known

// ---- edges -----------------------------------------------------------------------------------

// Which round of which workflow step a subtask is: key `step#n`, or `step#n.i` for item i of a
// map step's round (or of a plan); null for other keys (the `dag` workflow's `s1`, …).
export function roundOf(key) {
  const match = /^(.+)#(\d+)(?:\.(\d+))?$/.exec(key || "");
  return match ? {step: match[1], round: Number(match[2]), item: Number(match[3] || 0)} : null;
}

// The edges among the subtasks shown: one `dependency` per dependency (`pick` set when a
// route's run chose the step it leads to; `picks` maps such a run's id to the step it chose),
// and a `loop` from a round of a step to its next round: a workflow loop's way back.
export function edgesOf(work, picks = new Map()) {
  const shown = new Set(work.map((s) => s.subtask_id));
  const edges = [];
  for (const s of work) {
    for (const from of s.dependencies || []) {
      if (!shown.has(from)) continue;
      const pick = picks.has(from) && picks.get(from) === roundOf(s.key)?.step;
      edges.push({from, to: s.subtask_id, kind: "dependency", pick});
    }
  }
  return edges.concat(waysBack(work, edges));
}

// From each run of a round to the same item of the step's next round (or from the round's
// first run). Not where the dependencies already lead from one round to the next: a route
// decides again after each step it picked, and that is no loop.
function waysBack(work, edges) {
  const steps = new Map();  // step → round number → item → subtask id
  for (const s of work) {
    const at = s.key?.includes("#") ? roundOf(s.key) : null;
    if (!at) continue;
    if (!steps.has(at.step)) steps.set(at.step, new Map());
    const rounds = steps.get(at.step);
    if (!rounds.has(at.round)) rounds.set(at.round, new Map());
    rounds.get(at.round).set(at.item, s.subtask_id);
  }
  const loops = [];
  if (![...steps.values()].some((rounds) => rounds.size > 1)) return loops;  // no step ran twice
  const before = new Map();  // id → the ids it waits for
  for (const e of edges) {
    if (!before.has(e.to)) before.set(e.to, []);
    before.get(e.to).push(e.from);
  }
  for (const rounds of steps.values()) {
    const numbers = [...rounds.keys()].sort((a, b) => a - b);
    for (let i = 1; i < numbers.length; i++) {
      const earlier = rounds.get(numbers[i - 1]);
      const first = earlier.get(Math.min(...earlier.keys()));
      for (const [item, to] of rounds.get(numbers[i])) {
        const from = earlier.get(item) ?? first;
        if (!reaches(before, from, to)) loops.push({from, to, kind: "loop", pick: false});
      }
    }
  }
  return loops;
}

// Whether `to` waits for `from`, however indirectly.
function reaches(before, from, to) {
  const seen = new Set([to]);
  const queue = [to];
  for (let at = 0; at < queue.length; at++) {
    for (const next of before.get(queue[at]) || []) {
      if (next === from) return true;
      if (!seen.has(next)) { seen.add(next); queue.push(next); }
    }
  }
  return false;
}

// ---- layout ----------------------------------------------------------------------------------

// Where each subtask's node goes (`at`: id → its top left corner, its column in its layer's
// block and the block's sides), the layers' headings (`headings`: {x, y, text}) and the size
// of the whole, for a view of size `view`. `edges` are edgesOf's: a loop's next round is laid
// out after the round before it.
export function layout(work, edges, view = VIEW) {
  const index = new Map(work.map((s, i) => [s.subtask_id, i]));
  const preds = work.map(() => []);
  const succs = work.map(() => []);
  for (const e of edges) {
    const from = index.get(e.from);
    const to = index.get(e.to);
    if (from === undefined || to === undefined || from === to) continue;
    preds[to].push(from);
    succs[from].push(to);
  }
  const layers = [];
  depths(preds, succs).forEach((d, i) => (layers[d] ||= []).push(i));
  const placed = layers.filter(Boolean);
  const natural = naturalOrder(work);
  placed.forEach((layer) => layer.sort((a, b) => natural[a] - natural[b]));
  const rows = Math.max(MIN_ROWS, Math.ceil(1.25 * Math.sqrt(work.length)));
  order(placed, preds, succs, rows);
  const titles = placed.map((layer) => headingOf(layer.map((i) => work[i])));
  const {at, headings, width, height} = place(placed, rows, view, titles);
  return {at: new Map([...at].map(([i, spot]) => [work[i].subtask_id, spot])), headings, width,
          height};
}

// A layer's heading: its wave, when every node of it is a typed plan's task of the same wave.
function headingOf(layer) {
  const waves = new Set(layer.map((s) => (Number.isInteger(s.wave) ? s.wave : null)));
  const [wave] = waves;
  return waves.size === 1 && wave !== null ? `Wave ${wave + 1}` : null;
}

// Each subtask's rank in creation order, but numbered keys of one prefix in number order: the
// API breaks a tie of creation times by key, so that `s26` would come after `s250`.
function naturalOrder(work) {
  const prefixes = new Map();  // a key less its trailing number → when it first came
  const parts = work.map((s, i) => {
    const [, prefix, number] = /^(.*?)(\d*)$/.exec(s.key || "");
    if (!prefixes.has(prefix)) prefixes.set(prefix, prefixes.size);
    return {i, prefix: prefixes.get(prefix), number: number === "" ? -1 : Number(number)};
  });
  parts.sort((a, b) => a.prefix - b.prefix || a.number - b.number || a.i - b.i);
  const rank = new Array(work.length);
  parts.forEach((p, r) => { rank[p.i] = r; });
  return rank;
}

// Each node's layer: one past the deepest of those it waits for (Kahn's order, linear). A node
// on a cycle, which the engine never makes, stays where the nodes before it put it.
function depths(preds, succs) {
  const depth = preds.map(() => 0);
  const waiting = preds.map((p) => p.length);
  const ready = [];
  waiting.forEach((n, i) => { if (!n) ready.push(i); });
  for (let at = 0; at < ready.length; at++) {
    const v = ready[at];
    for (const w of succs[v]) {
      depth[w] = Math.max(depth[w], depth[v] + 1);
      if (--waiting[w] === 0) ready.push(w);
    }
  }
  return depth;
}

// A node's height in its layer, in rows from the layer's middle (a crowded layer wraps row by
// row into columns, so the order still reads top to bottom).
function slot(k, count, rows) {
  const columns = Math.ceil(count / rows);
  return Math.floor(k / columns) - (Math.ceil(count / columns) - 1) / 2;
}

// Barycenter sweeps: each layer sorted by the mean height of its nodes' neighbours in the
// layers before it (going down), then after it (going up). Ties keep their order.
function order(layers, preds, succs, rows) {
  const pos = new Float64Array(preds.length);
  const key = new Float64Array(preds.length);
  const settle = (layer) => layer.forEach((v, k) => { pos[v] = slot(k, layer.length, rows); });
  layers.forEach(settle);
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0;
    const near = down ? preds : succs;
    const pass = down ? layers.slice(1) : layers.slice(0, -1).reverse();
    for (const layer of pass) {
      for (const v of layer) {
        let sum = 0;
        for (const u of near[v]) sum += pos[u];
        key[v] = near[v].length ? sum / near[v].length : pos[v];
      }
      layer.sort((a, b) => key[a] - key[b]);
      settle(layer);
    }
  }
}

// The layers as blocks left to right, each centred in its band below its heading (`titles`,
// one per layer, null for none); bands top to bottom.
function place(layers, rows, view, titles) {
  const room = titles.some(Boolean) ? HEADING : 0;
  const blocks = layers.map((layer, i) => {
    const columns = Math.ceil(layer.length / rows);
    const down = Math.ceil(layer.length / columns);
    return {layer, columns, width: columns * (NODE.width + COLUMN_GAP) - COLUMN_GAP,
            height: down * (NODE.height + ROW_GAP) - ROW_GAP, title: titles[i]};
  });
  const at = new Map();
  const headings = [];
  let top = 0;
  let width = 0;
  for (const band of bands(blocks, view, room)) {
    const tall = Math.max(...band.map((b) => b.height)) + room;
    let left = 0;
    for (const block of band) {
      if (block.title) headings.push({x: left, y: top, text: block.title});
      const y = top + room + (tall - room - block.height) / 2;
      const sides = {left, right: left + block.width, last: block.columns - 1};
      block.layer.forEach((v, k) => at.set(v, {
        x: left + (k % block.columns) * (NODE.width + COLUMN_GAP),
        y: y + Math.floor(k / block.columns) * (NODE.height + ROW_GAP),
        column: k % block.columns, block: sides}));
      left += block.width + LAYER_GAP;
    }
    width = Math.max(width, left - LAYER_GAP);
    top += tall + BAND_GAP;
  }
  return {at, headings, width, height: Math.max(0, top - BAND_GAP)};
}

// The blocks cut into bands: the fewest that let the whole be read when fitted in the view,
// or else those that fit it at the largest zoom. One band for most graphs; a long chain reads
// like lines of text. A band more must gain a quarter in zoom, so a fan stays one band. Each
// band is `room` taller, for its headings.
function bands(blocks, view, room) {
  if (!blocks.length) return [];  // nothing to draw yet (a task still planning, or queued)
  const long = blocks.reduce((sum, b) => sum + b.width + LAYER_GAP, 0);
  let best = null;
  for (let count = 1; count <= Math.min(blocks.length, MAX_BANDS); count++) {
    const cut = pack(blocks, long / count);
    const width = Math.max(...cut.map((band) => band.reduce(
      (sum, b) => sum + b.width + LAYER_GAP, -LAYER_GAP)));
    const height = cut.reduce((sum, band) => sum + BAND_GAP + room + Math.max(
      ...band.map((b) => b.height)), -BAND_GAP);
    const zoom = Math.min(1, (view.width - 2 * PAD) / width, (view.height - 2 * PAD) / height);
    if (!best || zoom > best.zoom * 1.25) best = {cut, zoom};
    if (best.zoom >= READABLE) break;
  }
  return best.cut;
}

// The blocks in order, a band ending where the next block would pass `limit` (5 % slack).
function pack(blocks, limit) {
  const out = [[]];
  let used = 0;
  for (const block of blocks) {
    const wide = block.width + LAYER_GAP;
    if (used && used + wide > limit * 1.05) { out.push([]); used = 0; }
    out[out.length - 1].push(block);
    used += wide;
  }
  return out;
}

// An edge from the right of one node to the left of another: a curve leaving and arriving
// level (an S when it goes back, to the next band). Into or out of an inner column of a
// wrapped layer it runs along the gutter between rows, where the edges of a fan overlap into
// one line, instead of across the nodes of the columns before.
export function edgePath(a, b) {
  const out = [`M${a.x + NODE.width} ${a.y + NODE.height / 2}`];
  let from = {x: a.x + NODE.width, y: a.y + NODE.height / 2};
  if (a.column < a.block.last) {
    const gap = a.x + NODE.width + COLUMN_GAP / 2;
    from = {x: a.block.right, y: a.y + NODE.height + ROW_GAP / 2};
    out.push(`H${gap}V${from.y}H${from.x}`);
  }
  const tip = {x: b.x - 1, y: b.y + NODE.height / 2};  // just off the node's border
  const to = b.column > 0 ? {x: b.block.left, y: b.y - ROW_GAP / 2} : tip;
  const bend = Math.max(48, (to.x - from.x) / 2);
  out.push(`C${from.x + bend} ${from.y} ${to.x - bend} ${to.y} ${to.x} ${to.y}`);
  if (b.column > 0) out.push(`H${b.x - COLUMN_GAP / 2}V${tip.y}H${tip.x}`);
  return out.join("");
}

// ---- the critical path -----------------------------------------------------------------------

// How long a subtask has taken (ms): started to completed, or to now while it runs.
function took(s, now) {
  if (!s.started_at) return 0;
  const end = s.completed_at ? Date.parse(s.completed_at) : now;
  return Math.max(0, end - Date.parse(s.started_at));
}

// The chain of dependencies that took longest, end to start (the ids on it), among the
// subtasks that have started. Empty while nothing has.
export function criticalPath(work, byId, now = Date.now()) {
  const best = new Map();  // id → [time of the longest chain ending here, previous id]
  const visit = (s, seen = new Set()) => {
    if (best.has(s.subtask_id)) return best.get(s.subtask_id)[0];
    if (seen.has(s.subtask_id)) return 0;
    seen.add(s.subtask_id);
    let before = 0;
    let from = null;
    for (const d of s.dependencies) {
      const p = byId.get(d);
      if (!p) continue;
      const t = visit(p, seen);
      if (t > before) { before = t; from = d; }
    }
    const total = before + took(s, now);
    best.set(s.subtask_id, [total, from]);
    return total;
  };
  let end = null;
  let longest = 0;
  for (const s of work) {
    const t = visit(s);
    if (t > longest) { longest = t; end = s.subtask_id; }
  }
  const path = new Set();
  for (let at = end; at; at = best.get(at)[1]) path.add(at);
  return path;
}

// ---- the view --------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
const KINDS = ["dependency", "loop", "pick"];
const MAX_ZOOM = 2;
const MIN_ZOOM = 0.2;    // or less, when fitting a large graph needs it
const FAR = 0.35;        // below this zoom a node's text is too small to read: not drawn
const VIEW_HEIGHT = {least: 160, most: VIEW.height};  // the view's follows the graph's

function svg(tag, attrs = {}, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  el.append(...kids);
  return el;
}

function arrowheads() {
  return svg("defs", {}, ...KINDS.map((kind) => svg("marker", {
    id: `arrow-${kind}`, class: kind, viewBox: "0 0 10 10", refX: "10", refY: "5",
    markerWidth: "7", markerHeight: "7", orient: "auto"}, svg("path", {d: "M0 0L10 5L0 10z"}))));
}

// What each line of the graph means, each shown once the graph has such a line.
function legend() {
  const sample = (kind) => svg("svg", {class: "edges", width: "28", height: "10",
                                       "aria-hidden": "true"},
    svg("path", {d: "M1 5H27", "data-edge": kind === "pick" ? "dependency" : kind,
                 ...(kind === "pick" ? {"data-route-pick": ""} : {})}));
  const items = {
    dependency: h("li", {}, sample("dependency"), " waits for"),
    loop: h("li", {}, sample("loop"), " the next round (a loop's way back)"),
    pick: h("li", {}, sample("pick"), " a route's pick"),
  };
  return {element: h("ul", {class: "legend", "aria-label": "Lines"}, Object.values(items)),
          show(kinds) { for (const kind of KINDS) items[kind].hidden = !kinds.has(kind); }};
}

// Where the view looks: a pan (x, y) and a zoom (k) of the plane. Until the user moves it, it
// fits the graph after every redraw and resize; after, it stays where they put it.
function camera(viewport, plane, zoomShown) {
  let x = 0, y = 0, k = 1;
  let size = {width: 0, height: 0};
  let moved = false;
  let fitting = 0;  // the frame a fit is due in
  const fitScale = () => Math.min(1, (viewport.clientWidth - 2 * PAD) / (size.width || 1),
                                  (viewport.clientHeight - 2 * PAD) / (size.height || 1));
  const apply = () => {
    plane.style.transform = `translate(${x}px, ${y}px) scale(${k})`;
    viewport.dataset.scale = k.toFixed(3);
    viewport.toggleAttribute("data-far", k < FAR);  // nodes as coloured boxes: cheap to paint
    zoomShown.textContent = `${Math.round(k * 100)} %`;
  };
  const fit = () => {
    const wide = viewport.clientWidth;
    if (!wide) return;  // hidden (the timeline's tab): fitted when shown
    // As tall as the graph is at the zoom its width allows, within bounds
    const tall = size.height * Math.min(1, (wide - 2 * PAD) / (size.width || 1)) + 2 * PAD;
    viewport.style.height = `${Math.min(VIEW_HEIGHT.most, Math.max(VIEW_HEIGHT.least, tall))}px`;
    k = Math.max(0.01, fitScale());
    x = (viewport.clientWidth - size.width * k) / 2;
    y = (viewport.clientHeight - size.height * k) / 2;
    apply();
  };
  return {
    // The graph's new size: fitted before the next paint, unless the user moved the view.
    resize(next) {
      size = next;
      if (!moved && !fitting) fitting = requestAnimationFrame(() => { fitting = 0; fit(); });
    },
    refit() { if (!moved) fit(); },
    fit() { moved = false; fit(); },
    // Zoom by `factor` keeping the point (px, py) of the view still (its middle by default).
    zoom(factor, px = viewport.clientWidth / 2, py = viewport.clientHeight / 2) {
      const next = Math.min(MAX_ZOOM, Math.max(Math.min(MIN_ZOOM, fitScale()), k * factor));
      x = px - (px - x) * (next / k);
      y = py - (py - y) * (next / k);
      k = next;
      moved = true;
      apply();
    },
    pan(dx, dy) { x += dx; y += dy; moved = true; apply(); },
    // Bring `el` (a node the keyboard reached) into the middle of the view, if it is not in it.
    reveal(el) {
      const box = viewport.getBoundingClientRect();
      const r = el.getBoundingClientRect();
      if (r.left >= box.left && r.right <= box.right && r.top >= box.top
          && r.bottom <= box.bottom) return;
      this.pan(box.left + box.width / 2 - (r.left + r.width / 2),
               box.top + box.height / 2 - (r.top + r.height / 2));
    },
  };
}

// Pan by dragging (past a few pixels, so a click stays a click) and by the arrow keys; zoom by
// the wheel (pinching sends ctrl+wheel) and by + and −; 0 fits.
function steer(viewport, view) {
  viewport.addEventListener("wheel", (event) => {
    event.preventDefault();
    const box = viewport.getBoundingClientRect();
    const delta = event.deltaY * (event.deltaMode === 1 ? 16 : 1);
    view.zoom(Math.exp(-Math.max(-200, Math.min(200, delta)) / 400),
              event.clientX - box.left, event.clientY - box.top);
  }, {passive: false});
  let drag = null;
  viewport.addEventListener("pointerdown", (event) => {
    if (event.button === 0) drag = {id: event.pointerId, x: event.clientX, y: event.clientY};
  });
  viewport.addEventListener("pointermove", (event) => {
    if (!drag || drag.id !== event.pointerId) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!drag.moving && Math.hypot(dx, dy) < 4) return;
    if (!drag.moving) {  // from now on a drag: the click, if any, goes to the view, not a node
      drag.moving = true;
      viewport.setPointerCapture(event.pointerId);
      viewport.classList.add("dragging");
    }
    Object.assign(drag, {x: event.clientX, y: event.clientY});
    view.pan(dx, dy);
  });
  const drop = () => { drag = null; viewport.classList.remove("dragging"); };
  viewport.addEventListener("pointerup", drop);
  viewport.addEventListener("pointercancel", drop);
  viewport.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const step = event.shiftKey ? 240 : 48;
    const moves = {ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step],
                   ArrowDown: [0, -step]};
    if (moves[event.key]) view.pan(...moves[event.key]);
    else if (event.key === "+" || event.key === "=") view.zoom(1.25);
    else if (event.key === "-") view.zoom(0.8);
    else if (event.key === "0") view.fit();
    else return;
    event.preventDefault();
  });
}

// The task graph's view: `draw(work, node)` lays out the subtasks `work()` returns, as the
// buttons `node(s)` makes, over their edges. `graph` is the element that holds the nodes
// (`#graph`); `picked(decision)` records a `route_decision`, drawn with the next redraw.
export function graphView() {
  const edges = svg("svg", {class: "edges", "aria-hidden": "true"}, arrowheads());
  const nodes = h("div", {class: "nodes"});
  const heads = h("div", {class: "headings"});  // the layers' headings (a typed plan's waves)
  const plane = h("div", {class: "plane"}, edges, heads, nodes);
  const hint = h("span", {class: "muted", id: "graph-hint"},
                 "Drag or use the arrow keys to move; the wheel, + and − zoom; 0 fits.");
  const graph = h("div", {class: "graph", id: "graph", role: "group", tabindex: 0,
                          "aria-label": "Task graph", "aria-describedby": "graph-hint"}, plane);
  const zoomShown = h("output", {"aria-label": "Zoom"}, "100 %");
  const view = camera(graph, plane, zoomShown);
  const lines = legend();
  const tools = h("div", {class: "graph-tools", role: "group", "aria-label": "Graph view"},
    h("button", {type: "button", onclick: () => view.zoom(0.8)}, "Zoom out"),
    h("button", {type: "button", onclick: () => view.zoom(1.25)}, "Zoom in"),
    h("button", {type: "button", onclick: () => view.fit()}, "Fit"), zoomShown,
    lines.element);
  steer(graph, view);
  let wide = 0;  // the view's width, as last measured
  let last = null;  // what draw was given last: drawn again when the view's width changes
  // Laid out again for a new width; refitted in the next frame, since a fit sets the view's
  // height, which inside the observer's callback would be a resize loop
  const resized = new ResizeObserver(([entry]) => {
    const now = entry.contentRect.width;
    if (now && Math.abs(now - wide) > 1 && last) { wide = now; render(last.work(), last.node); }
    requestAnimationFrame(() => view.refit());
  });
  resized.observe(graph);
  const picks = new Map();  // a route run's id → the step it picked
  let drawing = false;  // a redraw gives the focus back: not the keyboard's move
  graph.addEventListener("focusin", (event) => {
    if (!drawing && event.target.classList.contains("node")) view.reveal(event.target);
  });

  // Each edge's path is kept across redraws and moved only if its ends moved: a redraw of
  // 500 nodes would otherwise remove and make a thousand of them again
  let paths = new Map();  // "from to kind" → its path
  const drawEdges = (links, at) => {
    const next = new Map();
    for (const e of links) {
      let key = `${e.from} ${e.to} ${e.kind}`;
      while (next.has(key)) key += "+";  // the same dependency twice: drawn twice
      let path = paths.get(key);
      if (!path) {
        path = document.createElementNS(SVG, "path");
        path.setAttribute("data-edge", e.kind);
        path.setAttribute("data-from", e.from);
        path.setAttribute("data-to", e.to);
      }
      const d = edgePath(at.get(e.from), at.get(e.to));
      if (path.getAttribute("d") !== d) path.setAttribute("d", d);
      const marker = `url(#arrow-${e.pick ? "pick" : e.kind})`;
      if (path.getAttribute("marker-end") !== marker) path.setAttribute("marker-end", marker);
      if (e.pick || path.hasAttribute("data-route-pick")) {
        path.toggleAttribute("data-route-pick", e.pick);
      }
      next.set(key, path);
    }
    for (const [key, path] of paths) if (!next.has(key)) path.remove();
    edges.append(...[...next.values()].filter((path) => !path.isConnected));
    paths = next;
  };
  const render = (work, node) => {
    wide ||= graph.clientWidth;  // once, before any node is in: a light layout
    const links = edgesOf(work, picks);
    const {at, headings, width, height} = layout(work, links, {width: wide || VIEW.width,
                                                               height: VIEW_HEIGHT.most});
    const names = new Map(work.map((s) => [s.subtask_id, s.name]));
    const waitsFor = new Map();
    for (const e of links) {
      if (e.kind !== "dependency") continue;
      if (!waitsFor.has(e.to)) waitsFor.set(e.to, []);
      waitsFor.get(e.to).push(names.get(e.from));
    }
    // The critical path stays outlined until it is marked again
    const critical = new Set([...nodes.querySelectorAll(".node.critical")].map(
      (n) => n.dataset.subtaskId));
    const buttons = work.map((s) => {
      const el = node(s);
      if (critical.has(s.subtask_id)) el.classList.add("critical");
      const {x, y} = at.get(s.subtask_id);
      el.style.cssText = `left:${x}px;top:${y}px;width:${NODE.width}px;height:${NODE.height}px`;
      el.title = s.name;
      const after = waitsFor.get(s.subtask_id);
      const said = [el.getAttribute("aria-description"),  // what `node` said of it, if anything
                    after ? `Waits for ${after.join(", ")}` : ""].filter(Boolean);
      if (said.length) el.setAttribute("aria-description", said.join(". "));
      return el;
    });
    edges.setAttribute("width", width);
    edges.setAttribute("height", height);
    drawEdges(links, at);
    heads.replaceChildren(...headings.map(({x, y, text}) => h("span", {
      class: "heading", style: `left:${x}px;top:${y}px;width:${NODE.width}px`}, text)));
    lines.show(new Set(links.map((e) => (e.pick ? "pick" : e.kind))));
    view.resize({width, height});
    drawing = true;
    try {
      replaceKeepingFocus(nodes, ...buttons);
    } finally {
      drawing = false;
    }
  };
  // Drawn at once; a redraw asked for again in the same task (events of one batch) is made
  // once, at its end, from what `work()` says then.
  let recent = false;
  let due = false;
  return {
    element: h("div", {class: "graph-view"}, tools, hint, graph),
    graph,
    draw(work, node) {
      last = {work, node};
      if (recent) {
        if (!due) queueMicrotask(() => { due = false; render(work(), node); });
        due = true;
        return;
      }
      recent = true;
      queueMicrotask(() => { recent = false; });
      render(work(), node);
    },
    picked(decision) {
      if (decision.subtask_id) picks.set(decision.subtask_id, decision.next);
    },
    stop() { resized.disconnect(); },
  };
}
