// agentkv dashboard: polls /v1/agents and /v1/dashboard once a second and renders them; the
// pin/unpin/evict buttons call the agents API. With --api-key the page asks for the key and
// sends it as x-api-key (the server then shows the key's tenant's agents only). No libraries.
"use strict";

const POLL_MS = 1000;
const KEY_STORAGE = "agentkv-api-key";
const $ = (sel) => document.querySelector(sel);

let apiKey = sessionStorage.getItem(KEY_STORAGE) || "";
let timer = null;

function headers() {
  return apiKey ? { "x-api-key": apiKey } : {};
}

async function api(path, method = "GET") {
  const res = await fetch(path, { method, headers: headers(), cache: "no-store" });
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  return { status: res.status, body };
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function ms(v) {
  return v === null || v === undefined ? "-" : v < 10 ? v.toFixed(1) + " ms" : v.toFixed(0) + " ms";
}

function setState(state, text) {
  document.body.dataset.state = state;
  $("#status").textContent = text;
}

function setField(root, name, text) {
  const el = root.querySelector(`[data-field="${name}"]`);
  if (el) el.textContent = text;
}

function renderEngine(e) {
  const root = $("#engine");
  setField(root, "running", String(e.running));
  setField(root, "waiting", String(e.waiting));
  setField(root, "restoring", String(e.restoring));
  setField(root, "step_ms", e.steps ? ms(e.step_ms) : "-");
  setField(root, "tokens_per_s", e.steps ? e.tokens_per_s.toFixed(0) : "-");
  setField(root, "requests_finished", String(e.requests_finished));
  setField(root, "cached_share",
           e.prompt_tokens ? (100 * e.cached_prompt_tokens / e.prompt_tokens).toFixed(0) + "%" : "-");
}

// A share of a bar as a CSS width; anything above zero shows at least a sliver.
function barWidth(frac) {
  return frac > 0 ? Math.max(1, 100 * Math.min(1, frac)).toFixed(1) + "%" : "0%";
}

function renderTier(name, usedFrac, cachedFrac, text) {
  const row = document.querySelector(`.tier[data-tier="${name}"]`);
  row.querySelector(".fill.used").style.width = barWidth(usedFrac);
  const cached = row.querySelector(".fill.cached");
  if (cached) cached.style.width = barWidth(cachedFrac);
  row.querySelector(".text").textContent = text;
}

function renderTiers(t) {
  const d = t.device;
  if (d.blocks > 0) {
    renderTier("device", d.used_blocks / d.blocks, d.cached_blocks / d.blocks,
               `${d.used_blocks} in use + ${d.cached_blocks} cached of ${d.blocks} blocks (${bytes(d.blocks * d.block_bytes)})`);
  } else {
    renderTier("device", 0, 0, `${d.capacity_tokens} tokens`);
  }
  if (!t.host) renderTier("host", 0, 0, "off (--kv-host-bytes)");
  else renderTier("host", t.host.bytes / t.host.max_bytes, 0,
                  `${bytes(t.host.bytes)} of ${bytes(t.host.max_bytes)}, ${t.host.blocks} blocks`);
  if (!t.disk) renderTier("disk", 0, 0, "off (--kv-dir)");
  else if (t.disk.unavailable) renderTier("disk", 0, 0, "unavailable: see the server log");
  else renderTier("disk", t.disk.max_bytes ? t.disk.bytes / t.disk.max_bytes : 0, 0,
                  `${bytes(t.disk.bytes)} of ${t.disk.max_bytes ? bytes(t.disk.max_bytes) : "unlimited"}, ${t.disk.blocks} blocks`);
}

function sparkline(turns) {
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("width", "120");
  svg.setAttribute("height", "24");
  const values = turns.map((t) => t.ttft_ms);
  svg.dataset.points = String(values.length);
  if (values.length === 0) return svg;
  const max = Math.max(...values, 1e-3);
  const step = values.length > 1 ? 118 / (values.length - 1) : 0;
  const points = values.map((v, i) => `${(1 + i * step).toFixed(1)},${(23 - 22 * v / max).toFixed(1)}`);
  if (values.length === 1) points.push(`119,${points[0].split(",")[1]}`);
  const line = document.createElementNS(svgNs, "polyline");
  line.setAttribute("points", points.join(" "));
  const title = document.createElementNS(svgNs, "title");
  title.textContent = "TTFT of the last turns: " + values.map((v) => ms(v)).join(", ");
  svg.append(title, line);
  return svg;
}

function cell(row, field, content) {
  const td = document.createElement("td");
  td.dataset.field = field;
  if (content instanceof Node) td.append(content);
  else td.textContent = content;
  row.append(td);
}

function actionButton(agent, action, label) {
  const b = document.createElement("button");
  b.textContent = label;
  b.dataset.action = action;
  b.addEventListener("click", async () => {
    b.disabled = true;
    const r = await api(`/v1/agents/${encodeURIComponent(agent.id)}/${action}`, "POST");
    if (r.status !== 200) $("#status").textContent = `${action} ${agent.id}: ${r.body?.error?.message || r.status}`;
    await refresh();
  });
  return b;
}

function renderAgents(agents, turns) {
  const tbody = $("#agents tbody");
  const rows = [];
  for (const a of agents) {
    const tr = document.createElement("tr");
    tr.dataset.agent = a.id;
    tr.dataset.pinned = String(a.pinned);
    if (a.pinned) tr.className = "pinned";
    const history = turns[a.id] || [];
    const last = history.length ? history[history.length - 1] : null;
    cell(tr, "id", a.id);
    cell(tr, "tokens", String(a.tokens));
    cell(tr, "blocks", String(a.blocks));
    cell(tr, "device", bytes(a.bytes.device));
    cell(tr, "host", bytes(a.bytes.host));
    cell(tr, "disk", bytes(a.bytes.disk));
    cell(tr, "requests", String(a.requests));
    cell(tr, "hit_rate", a.requests ? (100 * a.hits / a.requests).toFixed(0) + "%" : "-");
    cell(tr, "restores", String(a.restores));
    cell(tr, "ttft", last ? ms(last.ttft_ms) : "-");
    cell(tr, "history", sparkline(history));
    cell(tr, "pinned", a.pinned ? "yes" : "no");
    const actions = document.createElement("span");
    actions.append(a.pinned ? actionButton(a, "unpin", "unpin") : actionButton(a, "pin", "pin"), " ",
                   actionButton(a, "evict", "evict"));
    cell(tr, "actions", actions);
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
  $("#agent-count").textContent = `(${agents.length})`;
}

function askForKey(message) {
  $("#main").hidden = true;
  $("#key-form").hidden = false;
  $("#key-error").textContent = message || "";
  setState("auth", "API key needed");
  $("#key").focus();
}

async function refresh() {
  let agents, state;
  try {
    [agents, state] = await Promise.all([api("/v1/agents"), api("/v1/dashboard")]);
  } catch (e) {
    setState("error", "server unreachable: " + e.message);
    return;
  }
  if (state.status === 401 || agents.status === 401) {
    askForKey(apiKey ? "that key was refused" : "");
    return false;
  }
  if (state.status !== 200) {
    setState("error", `/v1/dashboard: ${state.body?.error?.message || state.status}`);
    return true;
  }
  $("#key-form").hidden = true;
  $("#main").hidden = false;
  $("#model").textContent = state.body.model;
  renderEngine(state.body.engine);
  renderTiers(state.body.tiers);
  const note = $("#agents-note");
  if (agents.status === 200) {
    note.hidden = true;
    renderAgents(agents.body.data, state.body.turns);
  } else {
    note.hidden = false;
    note.textContent = agents.body?.error?.message || `agents: ${agents.status}`;
    renderAgents([], {});
  }
  document.body.dataset.updates = String(Number(document.body.dataset.updates) + 1);
  setState("ok", "live · " + new Date().toLocaleTimeString());
  return true;
}

async function poll() {
  clearTimeout(timer);
  const again = await refresh();
  if (again !== false) timer = setTimeout(poll, POLL_MS);
}

$("#key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  apiKey = $("#key").value.trim();
  sessionStorage.setItem(KEY_STORAGE, apiKey);
  poll();
});

poll();
