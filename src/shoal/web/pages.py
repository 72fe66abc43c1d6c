"""The small built-in status page (the full dashboard comes later)."""

from __future__ import annotations

INDEX_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Shoal</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1b2430}
table{border-collapse:collapse;width:100%}td,th{padding:.3rem .5rem;border-bottom:1px solid #ddd;text-align:left}
.muted{color:#667}</style></head>
<body><h1>Shoal</h1>
<p class="muted">Control plane is running. API docs: <a href="/docs">/docs</a>.</p>
<div id="who" class="muted">Not signed in. Open the one-time link printed by <code>shoal up</code>.</div>
<h2>Tasks</h2><table id="tasks"><tr><th>Task</th><th>Status</th><th>Progress</th></tr></table>
<script>
async function signIn(){
  const p=new URLSearchParams(location.search);const t=p.get('token');
  if(t){const r=await fetch('/api/v1/auth/exchange',{method:'POST',headers:{'Content-Type':'application/json'},body:JSON.stringify({token:t})});
    if(r.ok){const j=await r.json();sessionStorage.setItem('shoal',j.access_token);}
    history.replaceState(null,'','/');}
  return sessionStorage.getItem('shoal');}
function row(t){const tr=document.createElement('tr');
  for(const v of [t.description,t.status,t.progress+'%']){const td=document.createElement('td');td.textContent=v;tr.appendChild(td);}
  return tr;}
async function load(){const tok=await signIn();if(!tok)return;
  const h={Authorization:'Bearer '+tok};const me=await fetch('/api/v1/users/me',{headers:h});
  if(!me.ok){sessionStorage.removeItem('shoal');return;}
  document.getElementById('who').textContent='Signed in as '+(await me.json()).username;
  const r=await fetch('/api/v1/tasks?limit=50',{headers:h});const j=await r.json();
  const tb=document.getElementById('tasks');tb.querySelectorAll('tr+tr').forEach(e=>e.remove());
  j.tasks.forEach(t=>tb.appendChild(row(t)));}
load();setInterval(load,3000);
</script></body></html>
"""
