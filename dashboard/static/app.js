// The llmswarm dashboard: reads the local API of the peer that serves it
// (same origin) and follows its live feed, GET /v1/swarm/events. No
// framework, no polling: the page redraws from the feed's events, and
// fetches once after an event when the event alone does not carry it all.
"use strict";

const $ = (id) => document.getElementById(id);

// el builds an element; children are nodes or strings (set as text, never
// parsed as HTML: every string from the API is data).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "style") Object.assign(e.style, v); // CSSOM: the page's CSP allows no style attribute
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

const short = (id) => (id ? (id.length > 12 ? "…" + id.slice(-8) : id) : "?");
const bytes = (n) => {
  if (!n) return "0";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
};
const ms = (x) => (x >= 1000 ? (x / 1000).toFixed(2) + " s" : x.toFixed(x < 10 ? 2 : 0) + " ms");
const clock = (t) => new Date(t).toTimeString().slice(0, 8);

// ---- API access ----

const authMode = document.querySelector('meta[name="swarm-auth"]').content;
let token = sessionStorage.getItem("swarm-token") || "";

class AuthError extends Error {}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (token) opts.headers.Authorization = "Bearer " + token;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  if (resp.status === 401) {
    askToken("The token was refused.");
    throw new AuthError("missing or wrong API token");
  }
  return resp;
}

async function apiJSON(method, path, body) {
  const resp = await api(method, path, body);
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error((data.error && data.error.message) || resp.status + " " + resp.statusText);
  return data;
}

function askToken(why) {
  const d = $("token-dialog");
  const p = d.querySelector("p");
  p.classList.toggle("error", !!why);
  if (why) p.textContent = why + " Enter this peer's API token.";
  if (!d.open) d.showModal();
  $("token-input").focus();
}

$("token-form").addEventListener("submit", () => {
  token = $("token-input").value.trim();
  sessionStorage.setItem("swarm-token", token);
  $("token-input").value = "";
  connect();
});
$("token-btn").addEventListener("click", () => askToken(""));

// ---- state ----

const state = {
  id: null, status: null, peers: [], ps: { models: [] }, shards: { models: [] }, bmc: null, ledger: null,
  tasks: new Map(),
  // Roles and shards stopped from this page, to restart with the same file.
  stopped: JSON.parse(sessionStorage.getItem("swarm-stopped") || "[]"),
};
const saveStopped = () => sessionStorage.setItem("swarm-stopped", JSON.stringify(state.stopped));

// ---- live feed ----

let source = null;

function connect() {
  if (source) source.close();
  if (authMode === "token" && !token) {
    askToken("");
    return;
  }
  const url = "/v1/swarm/events" + (token ? "?token=" + encodeURIComponent(token) : "");
  source = new EventSource(url);
  const live = $("live");
  source.onopen = () => { live.textContent = "live"; live.className = "pill on"; };
  source.onerror = () => {
    live.textContent = "reconnecting";
    live.className = "pill warn";
    if (source.readyState === EventSource.CLOSED) {
      // The browser gave up (an error answer, e.g. a refused token): find
      // out why once, then start again.
      api("GET", "/v1/swarm/id").then(() => setTimeout(connect, 3000), () => {});
    }
  };
  const on = (type, fn) => source.addEventListener(type, (m) => {
    const ev = JSON.parse(m.data);
    fn(ev.data, ev);
  });
  on("snapshot", (s) => {
    state.id = s.id; state.status = s.status; state.peers = s.peers.peers; state.ps = s.ps; state.bmc = s.bmc;
    for (const t of s.status.tasks || []) state.tasks.set(t.id, t);
    logEvent("snapshot", `${s.peers.peers.length} peers, ${s.ps.models.length} models loaded here`);
    render();
    refreshShards();
  });
  on("peers", (p, ev) => {
    const before = new Map(state.peers.map((x) => [x.peer_id, x.alive]));
    state.peers = p.peers;
    for (const x of p.peers) {
      if (!before.has(x.peer_id)) logEvent("peers", `${short(x.peer_id)} joined`, ev.time_ms);
      else if (before.get(x.peer_id) !== x.alive) logEvent("peers", `${short(x.peer_id)} is ${x.alive ? "alive again" : "dead"}`, ev.time_ms);
    }
    for (const id of before.keys()) {
      if (!p.peers.some((x) => x.peer_id === id)) logEvent("peers", `${short(id)} forgotten`, ev.time_ms);
    }
    renderPeers();
    refreshShards();
  });
  const onPS = (kind) => (ps, ev) => {
    const had = new Set(state.ps.models.flatMap(psKeys));
    const has = new Set(ps.models.flatMap(psKeys));
    for (const k of has) if (!had.has(k)) logEvent(kind, `now serving ${k}`, ev.time_ms);
    for (const k of had) if (!has.has(k)) logEvent(kind, `stopped serving ${k}`, ev.time_ms);
    state.ps = ps;
    renderLocal();
    refreshPeers();
    if (kind === "shards") refreshShards();
  };
  on("roles", onPS("roles"));
  on("shards", onPS("shards"));
  on("bmc", (b, ev) => {
    const prev = state.bmc && state.bmc.authority;
    state.bmc = b;
    const a = b.authority;
    if (a && (!prev || prev.signer !== a.signer || prev.boot !== a.boot)) logEvent("bmc", `table from ${short(a.signer)} (boot ${a.boot})`, ev.time_ms);
    if (!a && prev) logEvent("bmc", b.message || "no table in force", ev.time_ms);
    renderBMC();
    renderPeers();
  });
  on("task", (t, ev) => {
    const prev = state.tasks.get(t.id);
    if (!prev || prev.state !== t.state) logEvent("task", `${t.kind} ${t.name}: ${t.state}${t.error ? " (" + t.error + ")" : ""}`, ev.time_ms);
    state.tasks.set(t.id, t);
    renderTasks();
  });
  on("dropped", (n) => {
    logEvent("dropped", `${n} events lost: reloading the state`);
    refreshPeers();
    refreshShards();
    refreshPS();
  });
}

// One fetch after an event, coalesced: a burst of events costs one call.
function coalesce(fn) {
  let busy = false, again = false;
  const run = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try { await fn(); } catch (e) { if (!(e instanceof AuthError)) logEvent("error", e.message); }
    busy = false;
    if (again) { again = false; run(); }
  };
  return run;
}

const refreshPeers = coalesce(async () => {
  const [peers, status] = await Promise.all([apiJSON("GET", "/v1/swarm/peers"), apiJSON("GET", "/v1/swarm/status")]);
  state.peers = peers.peers;
  state.status = status;
  renderPeers();
  renderSelf();
  refreshLedger();
});

// A lost roles or shards event would leave a stop unconfirmed (renderLocal).
const refreshPS = coalesce(async () => {
  state.ps = await apiJSON("GET", "/v1/swarm/ps");
  renderLocal();
});

// The ledger changes with every answer given or taken, and receipts
// arrive later: it is read after each answer here and with the status.
const refreshLedger = coalesce(async () => {
  state.ledger = await apiJSON("GET", "/v1/swarm/ledger");
  renderLedger();
});

const refreshShards = coalesce(async () => {
  state.shards = await apiJSON("GET", "/v1/swarm/shards");
  renderCoverage();
});

// ---- rendering ----

function render() {
  renderSelf();
  renderPeers();
  renderLocal();
  renderTasks();
  renderBMC();
}

function renderSelf() {
  const id = state.id, st = state.status;
  if (!id || !st) return;
  const p = id.platform;
  $("self").replaceChildren(
    el("span", { class: "mono", title: id.peer_id }, short(id.peer_id)), " · ",
    `${p.device || p.os + "/" + p.arch} · v${id.version} · ${st.peers_alive}/${st.peers_known} peers alive`,
    st.private ? " · private swarm" : "",
  );
}

// bmcVerdict is what the BMC table in force says of a peer, if anything.
function bmcVerdict(peerID) {
  const a = state.bmc && state.bmc.authority;
  if (!a) return null;
  const n = (a.nodes || []).find((x) => x.peer_id === peerID);
  if (!n) return null;
  return n.alive ? "alive" : "dead";
}

function connKind(p) {
  if (p.self) return "self";
  const kinds = [...new Set((p.conns || []).map((c) => c.kind))];
  return kinds.length ? kinds.join("+") : "not connected";
}

function renderPeers() {
  const peers = [...state.peers].sort((a, b) => (b.self - a.self) || (b.alive - a.alive) || a.peer_id.localeCompare(b.peer_id));
  $("peer-count").textContent = `${peers.filter((p) => p.alive).length} alive of ${peers.length}`;
  $("peers").replaceChildren(...peers.map(peerCard));
}

function peerCard(p) {
  const pf = p.platform || {};
  const verdict = bmcVerdict(p.peer_id);
  const kind = connKind(p);
  const speed = Math.max(0, ...(p.roles || []).map((r) => r.tok_s || 0));
  const msl = (p.shards || []).map((s) => s.ms_per_layer || 0).filter((x) => x > 0);
  const load = p.capacity ? Math.min(1, p.active / p.capacity) : 0;
  const st = p.self ? state.status : null;
  let taking = "—";
  if (st) taking = st.power.taking_work ? "yes" : "no: " + (st.power.why || "");
  const bat = p.battery ? `${p.battery.percent}%${p.battery.charging ? " charging" : ""}` : "—";
  return el("div", { class: `peer ${p.alive ? "alive" : "dead"}${p.self ? " self" : ""}`, "data-peer": p.peer_id },
    el("div", { class: "peer-head" },
      el("span", { class: "peer-id mono", title: p.peer_id }, short(p.peer_id)),
      p.self ? el("span", { class: "pill" }, "this peer") : null,
      el("span", { class: `pill ${p.alive ? "alive" : "dead"}` }, p.alive ? "alive" : "dead"),
      p.self ? null : el("span", { class: `pill ${kind}` }, kind),
      verdict ? el("span", { class: `pill ${verdict}`, title: "verdict of the BMC table in force" }, "BMC: " + verdict) : null,
      p.relay ? el("span", { class: "pill relayed" }, "relay") : null,
    ),
    el("dl", { class: "kv" },
      el("dt", {}, "device"), el("dd", {}, [pf.device, `${pf.os}/${pf.arch}`].filter(Boolean).join(" · ")),
      el("dt", {}, "cpu · ram"), el("dd", {}, `${pf.cores || "?"} cores · ${bytes(pf.ram_bytes)}${pf.free_ram_bytes ? " (" + bytes(pf.free_ram_bytes) + " free)" : ""}`),
      el("dt", {}, "speed"), el("dd", {}, [speed ? speed.toFixed(1) + " tok/s" : "", msl.length ? Math.min(...msl).toFixed(2) + " ms/layer" : ""].filter(Boolean).join(" · ") || "—"),
      el("dt", {}, "load"), el("dd", {}, `${p.active}/${p.capacity} busy · ${p.queued || 0} queued`, el("div", { class: "meter" }, el("i", { style: { width: `${(load * 100).toFixed(0)}%` } }))),
      el("dt", {}, "battery"), el("dd", {}, bat),
      el("dt", {}, "thermal"), el("dd", {}, p.thermal || "—"),
      p.self ? el("dt", {}, "taking work") : null, p.self ? el("dd", {}, taking) : null,
      p.self ? null : el("dt", {}, "rtt"), p.self ? null : el("dd", {}, p.rtt_ms ? ms(p.rtt_ms) : "—"),
      p.alive ? null : el("dt", {}, "dead for"), p.alive ? null : el("dd", {}, ms(p.dead_for_ms || 0)),
    ),
    el("div", { class: "chips" },
      (p.roles || []).map((r) => el("span", { class: "chip role", title: `${r.model_name || ""} ${r.quant || ""} ${r.model_cid}` }, r.role)),
      (p.shards || []).map((s) => el("span", { class: "chip shard", title: s.model_cid }, `${s.model_name || short(s.model_cid)} [${s.start},${s.end})`)),
      !(p.roles || []).length && !(p.shards || []).length ? el("span", { class: "muted small" }, "serves no model") : null,
    ),
  );
}

function renderCoverage() {
  const models = state.shards.models || [];
  if (!models.length) {
    $("coverage").replaceChildren(el("p", { class: "muted" }, "No pipeline model is served in the swarm."));
    return;
  }
  $("coverage").replaceChildren(...models.map((m) => el("div", { class: "model" },
    el("div", { class: "row" },
      el("b", {}, m.name || short(m.model_cid)), el("span", { class: "muted small" }, `${m.layers} layers`),
      el("span", { class: `pill ${m.covered ? "alive" : "dead"}` }, m.covered ? "covered" : "gaps: " + m.gaps.map((g) => `[${g[0]},${g[1]})`).join(" ")),
    ),
    el("div", { class: "layers", title: "green: layers live peers hold; red: no live holder" },
      m.holders.map((h) => el("i", {
        class: h.alive ? "" : "dead",
        style: { left: `${(100 * h.start) / m.layers}%`, width: `${(100 * (h.end - h.start)) / m.layers}%` },
        title: `${short(h.peer_id)} [${h.start},${h.end})`,
      }))),
    el("div", { class: "small muted" }, m.holders.map((h) => `${short(h.peer_id)} [${h.start},${h.end})${h.alive ? "" : " dead"}`).join(" · ")),
  )));
}

// psKeys names what a loaded model serves, one key per role.
const psKeys = (m) => (m.kind === "role" ? (m.roles || []).map((r) => "role " + r) : [`${m.kind} ${m.name || short(m.model_cid)} [${m.start},${m.end})`]);

// stopKey names what a stopped entry served, as servingKeys does.
const stopKey = (s) => s.kind + ":" + (s.kind === "role" ? s.role : s.spec);
const servingKeys = (m) => (m.kind === "role" ? (m.roles || []).map((r) => "role:" + r) : ["shard:" + m.path + ":" + m.start + "-" + m.end]);

function renderLocal() {
  const models = state.ps.models || [];
  // A stop's reply and the roles or shards event that shows it may come in
  // either order. Until state.ps has shown an entry gone, its listing there
  // is stale: the entry stays stopped (and its row hidden). Once it was
  // gone, a listing means it serves again (restarted here or elsewhere).
  const serving = new Set(models.flatMap(servingKeys));
  state.stopped = state.stopped.filter((s) => {
    if (!serving.has(stopKey(s))) s.gone = true;
    return !(s.gone && serving.has(stopKey(s)));
  });
  saveStopped();
  const stopping = new Set(state.stopped.filter((s) => !s.gone).map(stopKey));
  const rows = [];
  for (const m of models) {
    if (m.kind === "role") {
      for (const r of m.roles) {
        if (stopping.has("role:" + r)) continue;
        rows.push(el("tr", {},
          el("td", {}, el("span", { class: "chip role" }, r)),
          el("td", {}, `${m.name || short(m.model_cid)} ${m.quant || ""}`),
          el("td", {}, `${m.sessions}/${m.slots} · ${m.queued} queued`),
          el("td", {}, el("button", { class: "danger small", "data-stop-role": r, onclick: () => stopRole(r, m.path) }, "Stop")),
        ));
      }
    } else if (m.kind === "shard" && !stopping.has(servingKeys(m)[0])) {
      rows.push(el("tr", {},
        el("td", {}, el("span", { class: "chip shard" }, `[${m.start},${m.end})`)),
        el("td", {}, `${m.name || short(m.model_cid)} ${m.quant || ""}`),
        el("td", {}, `${m.sessions}/${m.slots} · ${m.queued} queued`),
        el("td", {}, el("button", { class: "danger small", "data-stop-shard": `${m.start}-${m.end}`, onclick: () => stopShard(m) }, "Stop")),
      ));
    }
  }
  const mem = state.ps.memory || {};
  $("local").replaceChildren(
    el("p", { class: "small muted" }, `memory: ${bytes(mem.used_bytes)} used` + (mem.max_bytes ? ` of ${bytes(mem.max_bytes)}` : "")),
    rows.length
      ? el("table", {}, el("tr", {}, el("th", {}, "serves"), el("th", {}, "model"), el("th", {}, "sessions"), el("th", {}, "")), rows)
      : el("p", { class: "muted" }, "This peer serves no role or shard."),
  );
  $("stopped").replaceChildren(...(state.stopped.length ? [
    el("h3", {}, "Stopped from this page"),
    el("table", {}, state.stopped.map((s) => el("tr", {},
      el("td", {}, el("span", { class: `chip ${s.kind}` }, s.kind === "role" ? s.role : s.range)),
      el("td", { class: "mono small" }, s.path),
      el("td", {}, el("button", { class: "small", "data-restart": s.kind === "role" ? s.role : s.range, onclick: (e) => restart(s, e.target) }, "Restart")),
    ))),
  ] : []));
}

function renderTasks() {
  // Running tasks, and those ended in the last minute (as status lists them).
  for (const [id, t] of state.tasks) if (t.state !== "running" && Date.now() - t.started_ms > 60000) state.tasks.delete(id);
  const tasks = [...state.tasks.values()];
  $("tasks").replaceChildren(...(tasks.length ? [el("h3", {}, "Tasks"), ...tasks.map((t) => el("div", { class: "small" },
    `${t.kind} ${t.name} · ${t.stage || ""} · ${t.state}` + (t.total ? ` · ${((100 * t.done) / t.total).toFixed(0)}%` : ""),
    t.total ? el("div", { class: "meter" }, el("i", { style: { width: `${((100 * t.done) / t.total).toFixed(0)}%` } })) : null,
  ))] : []));
}

function renderLedger() {
  const l = state.ledger;
  if (!l) return;
  const accounts = (l.accounts || []).slice(0, 16);
  const num = (x) => x.toFixed(0);
  $("ledger").replaceChildren(
    el("p", { class: "small muted" }, `gave ${num(l.given)}, took ${num(l.taken)} (tokens of a whole model) · reciprocity ${l.reciprocity ? "on: contended roles serve those who served this peer first" : "off"}`),
    accounts.length ? el("table", {},
      el("tr", {}, el("th", {}, "peer"), el("th", {}, "gave it"), el("th", {}, "took from it"), el("th", {}, "balance"), el("th", {}, "standing")),
      accounts.map((a) => el("tr", {},
        el("td", { class: "mono", title: a.peer }, short(a.peer)), el("td", {}, num(a.given)), el("td", {}, num(a.taken)),
        el("td", {}, (a.balance >= 0 ? "+" : "") + num(a.balance)), el("td", {}, a.standing.toFixed(2)),
      ))) : el("p", { class: "muted" }, "No receipts yet: nobody served this peer or was served by it."),
  );
}

function renderBMC() {
  const b = state.bmc;
  if (!b) {
    $("bmc").replaceChildren(el("p", { class: "muted" }, "No BMC configured on this peer."));
    return;
  }
  const a = b.authority;
  const parts = [];
  if (a) {
    parts.push(el("p", { class: "small" }, `Table in force from ${short(a.signer)}, boot ${a.boot} seq ${a.seq}, ${ms(a.age_ms)} old; dead after ${ms(a.dead_after_ms)}.`));
    parts.push(el("table", {},
      el("tr", {}, el("th", {}, "node"), el("th", {}, "peer"), el("th", {}, "verdict"), el("th", {}, "last beat"), el("th", {}, "load")),
      (a.nodes || []).map((n) => el("tr", {},
        el("td", {}, n.handle), el("td", { class: "mono" }, short(n.peer_id)),
        el("td", {}, el("span", { class: `pill ${n.alive ? "alive" : "dead"}` }, n.alive ? "alive" : "dead")),
        el("td", {}, ms(n.age_ms)), el("td", {}, String(n.load)),
      ))));
    if ((a.partitions || []).length) {
      parts.push(el("p", { class: "small muted" }, "Partitions: " + a.partitions.map((p) => `${p.node} ${p.model} [${p.start},${p.end})`).join(" · ")));
    }
  } else {
    parts.push(el("p", { class: "warn" }, b.message || "No table in force."));
  }
  parts.push(el("p", { class: "small muted" }, "BMC peers: " + (b.bmc_peers || []).map((p) => `${short(p.peer_id)}${p.authority ? " (authority)" : ""}${p.live ? "" : " silent"}`).join(", ")));
  $("bmc").replaceChildren(...parts);
}

function logEvent(type, text, t) {
  const log = $("log");
  log.prepend(el("li", {}, el("time", {}, clock(t || Date.now())), el("b", {}, type), el("span", {}, text)));
  while (log.children.length > 200) log.lastChild.remove();
}

// ---- chaos controls ----

async function chaos(what, fn) {
  try {
    await fn();
  } catch (e) {
    if (!(e instanceof AuthError)) logEvent("error", `${what}: ${e.message}`);
  }
}

function stopRole(role, path) {
  chaos("stop " + role, async () => {
    await apiJSON("DELETE", "/v1/swarm/roles/" + encodeURIComponent(role));
    state.stopped.push({ kind: "role", role, path });
    saveStopped();
    renderLocal();
    logEvent("chaos", `stopped role ${role}`);
  });
}

function stopShard(m) {
  const range = `${m.start}-${m.end}`;
  chaos("stop shard " + range, async () => {
    await apiJSON("DELETE", `/v1/swarm/shards/${encodeURIComponent(m.model_cid)}/${range}`);
    state.stopped.push({ kind: "shard", range, path: m.path, spec: `${m.path}:${range}` });
    saveStopped();
    renderLocal();
    logEvent("chaos", `stopped shard [${m.start},${m.end}) of ${m.name || short(m.model_cid)}`);
  });
}

function restart(s, button) {
  button.disabled = true;
  button.textContent = "loading…";
  chaos("restart", async () => {
    try {
      if (s.kind === "role") await apiJSON("POST", "/v1/swarm/roles", { role: s.role, path: s.path });
      else await apiJSON("POST", "/v1/swarm/shards", { shard: s.spec });
      logEvent("chaos", `restarted ${s.kind} ${s.kind === "role" ? s.role : s.range}`);
    } finally {
      button.disabled = false;
      button.textContent = "Restart";
    }
  });
}

// ---- chat ----

// readSSE calls fn(event, data) for each server-sent event of a fetch
// response body.
async function readSSE(resp, fn) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = "message", data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) fn(event, JSON.parse(data.join("\n")));
    }
  }
}

function agentPanel(role, peer) {
  const key = role + "@" + peer;
  let p = document.querySelector(`.agent[data-key="${CSS.escape(key)}"]`);
  if (!p) {
    p = el("div", { class: "agent", "data-key": key, "data-role": role },
      el("h4", {}, el("span", {}, role), el("span", { class: "mono muted", title: peer }, short(peer)), el("span", { class: "meta muted small" })),
      el("div", { class: "answer" }));
    $("agents").append(p);
  }
  return p;
}

function showLatency(title, rows) {
  $("latency-wrap").hidden = !rows.length;
  $("latency-title").textContent = title;
  const max = Math.max(...rows.map((r) => r.a + (r.b || 0)), 0.001);
  $("latency").replaceChildren(...rows.map((r) => el("div", { class: "bar" },
    el("span", { class: "small", title: r.title || "" }, r.label),
    el("div", { class: "track" },
      el("i", { style: { width: `${(100 * r.a) / max}%` }, title: r.aTitle || "" }),
      r.b ? el("i", { class: "xfer", style: { width: `${(100 * r.b) / max}%` }, title: r.bTitle || "" }) : null),
    el("span", { class: "small mono" }, r.text),
  )));
}

$("ask-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const query = $("ask-input").value.trim();
  if (!query) return;
  const mode = document.querySelector('input[name="mode"]:checked').value;
  const maxTokens = parseInt($("ask-max").value, 10) || 64;
  const btn = $("ask-btn");
  btn.disabled = true;
  $("agents").replaceChildren();
  $("final").textContent = "";
  $("final-meta").textContent = "";
  $("final-wrap").hidden = true;
  $("latency-wrap").hidden = true;
  const status = $("ask-status");
  status.className = "muted small";
  status.textContent = "asking…";
  const started = performance.now();
  const body = { query, stream: true, max_tokens: maxTokens };
  if (mode) body.mode = mode;
  try {
    const resp = await api("POST", "/v1/swarm/query", body);
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || resp.status + " " + resp.statusText);
    }
    await readSSE(resp, (event, d) => {
      switch (event) {
        case "agent_token": {
          const p = agentPanel(d.role, d.peer);
          p.querySelector(".answer").append(d.text);
          status.textContent = "streaming…";
          break;
        }
        case "agent": {
          const p = agentPanel(d.role, d.peer);
          p.classList.add(d.error ? "failed" : "done");
          if (d.error) p.querySelector(".answer").textContent = d.error;
          else if (!p.querySelector(".answer").textContent) p.querySelector(".answer").textContent = d.content;
          p.querySelector(".meta").textContent = d.error ? "failed" : `${d.tokens} tok · ${d.tok_s.toFixed(1)} tok/s · ${ms(d.ms)}${d.conn ? " · " + d.conn : ""}`;
          break;
        }
        case "token":
          $("final-wrap").hidden = false;
          $("final").append(d.text);
          status.textContent = "streaming…";
          break;
        case "trace":
          logEvent("trace", `${d.kind}${d.route ? ": " + d.route.map((h) => `${short(h.peer)} [${h.start},${h.end})`).join(" → ") : ""}${d.reason ? " " + d.reason : ""}`);
          break;
        case "result":
          finish(d);
          break;
        case "error":
          throw new Error(d.error.message);
      }
    });
    status.textContent = `done in ${ms(performance.now() - started)}`;
  } catch (err) {
    status.className = "error small";
    status.textContent = err.message;
  } finally {
    btn.disabled = false;
  }
});

function finish(r) {
  refreshLedger();
  $("final-wrap").hidden = false;
  $("final").textContent = r.final_answer;
  const agg = r.aggregator ? ` · aggregated by ${r.aggregator.role} on ${short(r.aggregator.peer)}` : "";
  $("final-meta").textContent = `${r.mode} · ${r.query_type} · ${r.agents_responded} agents${agg} · ${ms(r.total_time_ms)}`;
  for (const a of r.agent_responses || []) {
    const p = agentPanel(a.role, a.peer);
    p.classList.add("done");
    if (!p.querySelector(".answer").textContent) p.querySelector(".answer").textContent = a.content;
  }
  const pipe = r.pipeline;
  if (pipe && pipe.hops) {
    showLatency(`Pipeline hops · ${(pipe.decode_tok_s || 0).toFixed(1)} tok/s · first token ${ms(pipe.ttft_ms || 0)}`, pipe.hops.map((h, i) => ({
      label: `hop ${i} ${short(h.peer)} [${h.start},${h.end})`,
      title: h.peer,
      a: h.compute_ms_per_token, b: h.transfer_ms_per_token,
      aTitle: "compute ms/token", bTitle: "transfer ms/token",
      text: `${h.compute_ms_per_token.toFixed(2)}+${h.transfer_ms_per_token.toFixed(2)} ms`,
    })));
    const answer = agentPanel("pipeline", (pipe.hops[0] || {}).peer || "");
    answer.querySelector(".meta").textContent = `${(pipe.tokens || []).length} tok · ${(pipe.decode_tok_s || 0).toFixed(1)} tok/s`;
    if (!answer.querySelector(".answer").textContent) answer.querySelector(".answer").textContent = r.final_answer;
  } else {
    const agents = [...(r.agent_responses || []), ...(r.aggregator ? [r.aggregator] : [])];
    showLatency("Agents · time to first token + generation", agents.map((a) => ({
      label: `${a.role} ${short(a.peer)}`, title: a.peer,
      a: a.ttft_ms || 0, b: Math.max(0, (a.ms || 0) - (a.ttft_ms || 0)),
      aTitle: "time to first token", bTitle: "generation",
      text: ms(a.ms || 0),
    })));
  }
}

function dataURL(blob) {
  return new Promise((ok, fail) => {
    const r = new FileReader();
    r.onload = () => ok(r.result);
    r.onerror = () => fail(r.error);
    r.readAsDataURL(blob);
  });
}

// The invitation is a secret: fetched and shown only when asked for,
// hidden again on a second click.
$("invite-show").addEventListener("click", async () => {
  const box = $("invite"), btn = $("invite-show"), meta = $("invite-meta");
  if (!box.hidden) {
    box.hidden = true;
    btn.textContent = "Show invitation";
    return;
  }
  try {
    const inv = await apiJSON("GET", "/v1/swarm/invite");
    $("invite-token").textContent = inv.token;
    const resp = await api("GET", "/v1/swarm/invite/qr.png");
    // A data: URL, as the page's CSP allows images from itself and data:
    // only (the PNG needs the API token, so no plain <img src>).
    $("invite-qr").src = resp.ok ? await dataURL(await resp.blob()) : "";
    meta.className = "small muted";
    meta.textContent = `swarm ${inv.swarm_id} · ${inv.addrs.length} address(es)`;
    box.hidden = false;
    btn.textContent = "Hide";
  } catch (err) {
    if (err instanceof AuthError) return;
    meta.className = "small error";
    meta.textContent = err.message;
  }
});

connect();
