// The task graph's layout and its critical path: pure functions over the subtasks shown.

// Layers by depth: a subtask sits one layer after the deepest of its dependencies.
export function layers(work, byId) {
  const depth = new Map();
  const depthOf = (s, seen = new Set()) => {
    if (depth.has(s.subtask_id)) return depth.get(s.subtask_id);
    if (seen.has(s.subtask_id)) return 0;
    seen.add(s.subtask_id);
    const parents = s.dependencies.map((d) => byId.get(d)).filter(Boolean);
    const d = parents.length ? 1 + Math.max(...parents.map((p) => depthOf(p, seen))) : 0;
    depth.set(s.subtask_id, d);
    return d;
  };
  const out = [];
  for (const s of work) (out[depthOf(s)] ||= []).push(s);
  return out.filter(Boolean);
}

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
