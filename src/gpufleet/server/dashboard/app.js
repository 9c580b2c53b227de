"use strict";
// The gpufleet dashboard. Hash routes: #/cluster, #/queues, #/jobs, #/jobs/ID, #/services,
// #/services/NAME, #/nodes, #/nodes/NAME. Data comes from the controller's REST API with the token kept in
// sessionStorage and sent as a Bearer header; the current page polls every few seconds.
// Every piece of text goes into the page as a text node, never parsed as HTML, so nothing the
// API returns can become markup.

const API = "/api/v1";
const POLL_MS = 3000;
const TOKEN_KEY = "gpufleet.token";
const STATES = ["PENDING", "STARTING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED",
  "TIMED_OUT", "PREEMPTED", "NODE_LOST"];
const GPU_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

const app = { me: null, skew: 0, page: null, timer: null, gen: 0, ticks: 0 };
const jobFilter = { user: "", queue: "", state: "" };

// ----- DOM -----------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

/** An element; attributes by setAttribute, children as nodes or text (never parsed). */
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const kid of kids.flat(Infinity)) {
    if (kid !== null && kid !== undefined && kid !== false) el.append(kid);
  }
  return el;
}

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  setAttrs(el, attrs);
  for (const kid of kids.flat(Infinity)) if (kid) el.append(kid);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.setAttribute("class", v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function table(headers, rows, empty) {
  const body = rows.length ? rows : [h("tr", {}, h("td", { colspan: headers.length,
    class: "muted" }, empty || "none"))];
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, body));
}

const tr = (...cells) => h("tr", {}, cells.map((c) => (c instanceof Node && c.tagName === "TD"
  ? c : h("td", {}, c))));
const badge = (text, kind) => h("span", { class: `badge ${kind || String(text).toLowerCase()}` },
  text);
const link = (href, text) => h("a", { href }, text);
const jobLink = (id) => link(`#/jobs/${encodeURIComponent(id)}`, id);
const nodeLink = (name) => link(`#/nodes/${encodeURIComponent(name)}`, name);
const section = (title, ...kids) => h("section", { class: "card" }, h("h2", {}, title), kids);

// ----- numbers and times ---------------------------------------------------------------

const now = () => Date.now() / 1000 + app.skew; // the controller's clock
const num = (v, d = 0) => (v === null || v === undefined || !isFinite(v) ? "–"
  : Number(v).toFixed(d));
const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(0)}%`);

function dur(s) {
  if (s === null || s === undefined || !isFinite(s)) return "–";
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function clock(t) {
  if (t === null || t === undefined) return "–";
  const d = new Date(t * 1000);
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === new Date().toDateString() ? time
    : `${d.toLocaleDateString()} ${time}`;
}

const ago = (t) => (t === null || t === undefined ? "never" : `${dur(now() - t)} ago`);

function when(t) {
  if (t === null || t === undefined) return "–";
  const dt = t - now();
  return dt > 0 ? `in ${dur(dt)} (${clock(t)})` : `now (${clock(t)})`;
}

// How sure an estimated start is (the Reason's start_bound): a bound, not a promise.
const BOUND_WORDS = {
  reserved: "at the latest (reserved, unless nodes fail or a job of higher priority comes)",
  planned: "the queue played forward, if no job of higher priority comes",
};

function estimatedStart(r) {
  if (!r || r.estimated_start === null || r.estimated_start === undefined) return "–";
  const words = BOUND_WORDS[r.start_bound];
  let at = when(r.estimated_start);
  if (r.start_low != null && r.start_high != null) {
    at += ` (80 % between ${when(r.start_low)} and ${when(r.start_high)})`;
  }
  return words ? `${at}, ${words}` : at;
}

// ----- the API -------------------------------------------------------------------------

class Unauthorized extends Error {}

async function detail(r) {
  try {
    const body = await r.json();
    return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch {
    return r.statusText;
  }
}

async function api(path, token) {
  token = token || sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new Unauthorized("sign in to see the cluster");
  const r = await fetch(API + path, {
    headers: { Authorization: `Bearer ${token}` }, cache: "no-store",
  });
  if (r.status === 401) throw new Unauthorized(await detail(r));
  if (!r.ok) throw new Error(`${r.status}: ${await detail(r)}`);
  return r.json();
}

const qs = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
};

// ----- sign-in -------------------------------------------------------------------------

function showLogin(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  app.me = null;
  clearTimeout(app.timer);
  $("who").textContent = "";
  $("status").textContent = "";
  $("logout").hidden = true;
  $("main").replaceChildren();
  $("login-error").textContent = message || "";
  $("login").hidden = false;
  $("token").value = "";
  $("token").focus();
}

async function signIn(token) {
  const me = await api("/dashboard/me", token);
  sessionStorage.setItem(TOKEN_KEY, token);
  app.me = me;
  app.skew = me.time - Date.now() / 1000;
  $("who").textContent = me.role === "user" ? `${me.user} · user` : `${me.name} · ${me.role}`;
  $("logout").hidden = false;
  $("login").hidden = true;
  route();
}

async function onLoginSubmit(ev) {
  ev.preventDefault();
  const token = $("token").value.trim();
  $("login-error").textContent = "";
  try {
    await signIn(token);
  } catch (e) {
    $("login-error").textContent = `Not signed in: ${e.message}`;
  }
}

// ----- routing and polling -------------------------------------------------------------

const PAGES = { cluster: clusterPage, queues: queuesPage, jobs: jobsPage,
  services: servicesPage, nodes: nodesPage };

function route() {
  if (!app.me) return;
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const key = PAGES[name] ? name : "cluster";
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : "";
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === key);
  }
  app.gen += 1;
  app.page = PAGES[key](arg);
  document.title = `gpufleet · ${key}${arg ? ` · ${arg}` : ""}`;
  $("main").replaceChildren(app.page.el);
  tick(app.gen);
}

async function tick(gen) {
  clearTimeout(app.timer);
  const mine = ++app.ticks; // a newer tick (a filter changed) supersedes this one
  const current = () => gen === app.gen && mine === app.ticks && app.me !== null;
  if (!current()) return;
  if (!document.hidden) {
    try {
      await app.page.refresh(current);
      if (!current()) return;
      $("status").textContent = `updated ${clock(now())}`;
      $("status").classList.remove("error");
      banner("");
    } catch (e) {
      if (e instanceof Unauthorized) return showLogin(`Signed out: ${e.message}`);
      if (!current()) return;
      $("status").textContent = `error at ${clock(now())}`;
      $("status").classList.add("error");
      banner(e.message);
    }
  }
  app.timer = setTimeout(() => tick(gen), POLL_MS);
}

/** A page: a fixed frame with slots that each refresh replaces. */
function page(title, ...slots) {
  return h("div", { class: "page" }, h("h1", {}, title),
    h("p", { class: "banner", role: "alert", hidden: true }), slots);
}

/** The page's error line: shown with ``message``, hidden without. */
function banner(message) {
  const el = document.querySelector("#main .banner");
  if (!el) return;
  el.textContent = message || "";
  el.hidden = !message;
}

const slot = (cls) => h("div", { class: cls || "slot" });

// ----- colors --------------------------------------------------------------------------

function ramp(stops, x) {
  x = Math.min(1, Math.max(0, x));
  for (let i = 1; i < stops.length; i++) {
    const [x1, c1] = stops[i];
    const [x0, c0] = stops[i - 1];
    if (x <= x1) {
      const f = (x - x0) / (x1 - x0 || 1);
      const c = c0.map((v, k) => Math.round(v + f * (c1[k] - v)));
      return { bg: `rgb(${c.join(",")})`, dark: c[0] * 0.3 + c[1] * 0.59 + c[2] * 0.11 < 140 };
    }
  }
  return { bg: "#ccc", dark: false };
}

const UTIL_RAMP = [[0, [238, 243, 250]], [0.5, [84, 145, 206]], [1, [8, 48, 107]]];
const TEMP_RAMP = [[0, [255, 247, 220]], [0.5, [252, 160, 70]], [1, [165, 15, 21]]];
const HEAT = {
  util: { title: "GPU utilization", unit: "%", key: "util", lo: 0, hi: 100, stops: UTIL_RAMP },
  temp: { title: "GPU temperature", unit: "°C", key: "temp", lo: 30, hi: 90, stops: TEMP_RAMP },
};

// ----- cluster -------------------------------------------------------------------------

function clusterPage() {
  const summary = slot("summary");
  const alerts = slot("alerts");
  const maps = slot("heatmaps");
  const nodes = slot();
  return {
    el: page("Cluster", summary, alerts, maps, nodes),
    async refresh(current) {
      const [c, a] = await Promise.all([api("/dashboard/cluster"), alertsOf()]);
      if (!current()) return;
      app.skew = c.time - Date.now() / 1000;
      summary.replaceChildren(...summaryCards(c));
      alerts.replaceChildren(...alertsSection(a, c.nodes));
      maps.replaceChildren(heatmap(c, HEAT.util), heatmap(c, HEAT.temp));
      nodes.replaceChildren(nodesTable(c.nodes));
    },
  };
}

/** Prometheus's alerts as the controller relays them; a failure here is the alerts' own. */
async function alertsOf() {
  try {
    return await api("/dashboard/alerts");
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    return { configured: true, alerts: [], error: e.message };
  }
}

/** The firing and pending alerts as a table; nothing when none, a note when they are unknown. */
function alertsSection(a, nodes) {
  if (!a.configured) {
    return [h("p", { class: "alerts-note muted" }, "Alerts: no Prometheus is configured " +
      "(start the controller with --prometheus URL to see its alerts here).")];
  }
  if (a.error) return [h("p", { class: "alerts-note warn" }, `Alerts unknown: ${a.error}`)];
  if (!a.alerts.length) return [];
  const known = new Set(nodes.map((n) => n.name));
  const rows = a.alerts.map((x) => {
    const row = tr(h("td", { class: "strong" }, x.name), badge(x.state),
      x.severity ? badge(x.severity) : "–",
      x.node ? (known.has(x.node) ? nodeLink(x.node) : x.node) : "–", x.gpu || "–",
      h("td", { class: "why", title: x.description }, x.summary),
      h("td", { title: x.active_at }, x.since ? `${clock(x.since)} (${ago(x.since)})` : "–"));
    row.dataset.alert = x.name;
    row.dataset.state = x.state;
    if (x.node) row.dataset.node = x.node;
    return row;
  });
  const firing = a.alerts.filter((x) => x.state === "firing").length;
  const title = `Alerts: ${firing} firing, ${a.alerts.length - firing} pending` +
    (a.more ? ` (and ${a.more} more)` : "");
  const box = section(title, table(["Alert", "State", "Severity", "Node", "GPU", "Summary",
    "Since"], rows));
  box.classList.add("alerts-box", firing ? "firing" : "pending");
  return [box];
}

function summaryCards(c) {
  const utils = c.nodes.flatMap((n) => n.gpus.map((g) => g.util)).filter((u) => u != null);
  const mean = utils.length ? utils.reduce((a, b) => a + b, 0) / utils.length : null;
  const stat = (label, value, extra) => h("div", { class: "stat card" },
    h("div", { class: "label" }, label), h("div", { class: "value" }, value), extra);
  return [
    stat("Nodes", String(c.nodes.length), h("div", { class: "states" },
      Object.entries(c.states).sort().map(([s, n]) => badge(`${n} ${s}`, s)))),
    stat("GPUs allocated", `${num(c.gpus_allocated, 1)} / ${num(c.gpus_total)}`,
      h("div", { class: "muted" }, pct(c.gpus_total ? c.gpus_allocated / c.gpus_total : 0))),
    stat("Mean GPU utilization", mean === null ? "–" : `${mean.toFixed(0)}%`,
      h("div", { class: "muted" }, `${utils.length} GPUs reporting`)),
    stat("Running jobs", String(c.running_jobs)),
    stat("Pending jobs", String(c.pending_jobs), h("div", {}, link("#/queues", "why?"))),
  ];
}

function heatmap(c, spec) {
  const cols = Math.max(1, ...c.nodes.map((n) => n.gpus.length));
  const grid = h("div", { class: "heat", "data-metric": spec.key });
  grid.style.gridTemplateColumns = `minmax(9em, max-content) repeat(${cols}, minmax(2.6em, 1fr))`;
  grid.append(h("div", { class: "corner" }, "node \\ GPU"));
  for (let i = 0; i < cols; i++) grid.append(h("div", { class: "colhead" }, String(i)));
  for (const n of c.nodes) {
    grid.append(h("div", { class: "rowhead" }, nodeLink(n.name), " ", badge(n.state)));
    for (let i = 0; i < cols; i++) grid.append(heatCell(n, n.gpus[i], spec));
  }
  const legend = h("div", { class: "legend" }, `${spec.lo}${spec.unit}`,
    h("span", { class: `ramp ${spec.key}` }), `${spec.hi}${spec.unit}`,
    h("span", { class: "cell-key alloc" }), "allocated",
    h("span", { class: "cell-key bad" }), "unhealthy");
  return section(`${spec.title} (${spec.unit})`, grid, legend);
}

function heatCell(n, g, spec) {
  if (!g) return h("div", { class: "cell none" });
  const v = g[spec.key];
  const cell = h("div", { class: "cell" }, v === undefined ? "–" : num(v));
  if (v !== undefined && g.reporting) {
    const { bg, dark } = ramp(spec.stops, (v - spec.lo) / (spec.hi - spec.lo));
    cell.style.background = bg;
    if (dark) cell.classList.add("dark");
  } else {
    cell.classList.add("none");
  }
  if (g.alloc > 0) cell.classList.add("alloc");
  if (!g.healthy) cell.classList.add("bad");
  if (g.jobs.length) cell.dataset.jobs = g.jobs.join(" ");
  const who = g.jobs.length ? `jobs ${g.jobs.join(", ")}` : g.alloc > 0 ? "allocated" : "free";
  cell.title = `${n.name} GPU ${g.index}: ${num(g.util)}% util, ${num(g.temp)} °C, ` +
    `${num(g.power)} W, ${num(g.fb_used / 1024, 1)} GiB used; ${pct(g.alloc)} allocated, ${who}` +
    (g.healthy ? "" : "; UNHEALTHY");
  return cell;
}

function nodesTable(nodes) {
  const rows = nodes.map((n) => {
    const alloc = n.gpus.reduce((a, g) => a + g.alloc, 0);
    return tr(nodeLink(n.name), badge(n.state), n.gpu_model,
      `${num(alloc, 1)} / ${n.gpus.length}`, `${n.leaf} / ${n.pod}`, ago(n.last_heartbeat),
      h("td", { class: "why" }, n.why));
  });
  return section("Nodes", table(["Node", "State", "GPU model", "GPUs allocated", "Leaf / pod",
    "Last heartbeat", "Why"], rows, "no node has registered"));
}

// ----- queues --------------------------------------------------------------------------

const GPU_HOURS_DAYS = 7; // the GPU-hours section's period: the last week

function queuesPage() {
  const queues = slot();
  const hours = slot();
  const pending = slot();
  return {
    el: page("Queues", queues, hours, pending),
    async refresh(current) {
      const since = qs({ since: (now() - GPU_HOURS_DAYS * 86400).toFixed(0) });
      const [qs_, jobs, byQueue, byUser] = await Promise.all([api("/queues"),
        api("/jobs?state=PENDING&limit=500"), api(`/accounting${since}&by=queue`),
        api(`/accounting${since}&by=user`)]);
      if (!current()) return;
      queues.replaceChildren(queuesTable(qs_));
      hours.replaceChildren(gpuHoursSection(byQueue, byUser));
      pending.replaceChildren(pendingTable(jobs));
    },
  };
}

// GPU-hours allocated (the attempts' GPUs × their time) against used (weighted by the GPUs'
// DCGM_FI_DEV_GPU_UTIL), per queue and per user: where held GPUs sit idle
function gpuHoursSection(byQueue, byUser) {
  const rows = (list, kind) => list.map((r) => tr(h("td", { class: "key" }, r.key),
    kind, String(r.jobs), num(r.gpu_hours, 1), num(r.used_gpu_hours, 1),
    r.gpu_hours > 0 ? pct(r.used_gpu_hours / r.gpu_hours) : "–"));
  return section(`GPU-hours allocated and used, last ${GPU_HOURS_DAYS} days`,
    h("div", { class: "gpu-hours" }, table(["Queue or user", "By", "Jobs", "Allocated",
      "Used", "Used share"], [...rows(byQueue, "queue"), ...rows(byUser, "user")],
    "no GPU time in the period")));
}

function usageBar(used, quota) {
  const frac = quota ? Math.min(1, used / quota) : 0;
  const bar = h("span", { class: "bar" }, h("span", { class: used > quota ? "fill over" : "fill" }));
  bar.firstChild.style.width = `${(100 * frac).toFixed(0)}%`;
  return bar;
}

function queuesTable(queues) {
  const rows = queues.map((q) => tr(
    h("td", { class: "strong" }, q.name), q.cohort || "–", num(q.weight, 1),
    q.quota_gpus === null ? "unlimited" : `${num(q.quota_gpus, 1)} GPUs`,
    h("td", {}, `${num(q.used_gpus, 1)} GPUs `, q.quota_gpus === null ? null
      : usageBar(q.used_gpus, q.quota_gpus)),
    q.borrowing ? badge("borrowing", "warn") : "no",
    pct(q.dominant_share), h("td", { title: "decayed past usage, share·seconds" },
      num(q.fair_share_usage, 1)),
    String(q.running), String(q.pending)));
  return section("Quota, usage and fair share", table(["Queue", "Cohort", "Weight", "Quota",
    "In use", "Borrowing", "Dominant share", "Fair-share usage", "Running", "Pending"], rows,
  "no queue"));
}

function reasonCell(r) {
  if (!r) return h("td", { class: "muted" }, "waiting for the next scheduling cycle");
  return h("td", { class: "reason" }, badge(r.code, "reason"), " ", r.message);
}

function pendingTable(jobs) {
  const rows = jobs.map((j) => tr(jobLink(j.id), j.name, j.user, j.queue,
    gpusText(j),
    dur(now() - j.submit_time), reasonCell(j.reason),
    estimatedStart(j.reason)));
  return section("Pending jobs and why they wait", table(["Job", "Name", "User", "Queue", "GPUs",
    "Waiting", "Reason", "Estimated start"], rows, "no job is pending"));
}

// ----- jobs ----------------------------------------------------------------------------

function jobsPage(id) {
  return id ? jobPage(id) : jobListPage();
}

function jobListPage() {
  const mine = app.me.role === "user";
  if (mine) jobFilter.user = app.me.user;
  const user = h("input", { id: "f-user", placeholder: "any user", value: jobFilter.user,
    disabled: mine, title: mine ? "a user's token sees only that user's jobs" : null });
  const queue = h("select", { id: "f-queue" }, h("option", { value: "" }, "any queue"));
  const state = h("select", { id: "f-state" },
    h("option", { value: "" }, "active (not ended)"), h("option", { value: "all" }, "all"),
    STATES.map((s) => h("option", { value: s }, s)));
  state.value = jobFilter.state;
  const list = slot();
  const changed = () => {
    Object.assign(jobFilter, { user: user.value.trim(), queue: queue.value, state: state.value });
    tick(app.gen);
  };
  user.addEventListener("change", changed);
  queue.addEventListener("change", changed);
  state.addEventListener("change", changed);
  const filters = h("div", { class: "filters card" },
    h("label", {}, "User ", user), h("label", {}, "Queue ", queue),
    h("label", {}, "State ", state));
  return {
    el: page("Jobs", filters, list),
    async refresh(current) {
      const f = jobFilter;
      const [jobs, queues] = await Promise.all([
        api(`/jobs${qs({ user: f.user, queue: f.queue, state: f.state === "all" ? "" : f.state,
          all: f.state === "all" ? "true" : "", limit: 500 })}`),
        api("/queues"),
      ]);
      if (!current()) return;
      const names = queues.map((q) => q.name);
      if (queue.options.length !== names.length + 1) {
        queue.replaceChildren(h("option", { value: "" }, "any queue"),
          ...names.map((n) => h("option", { value: n }, n)));
        queue.value = f.queue;
      }
      list.replaceChildren(jobsTable(jobs));
    },
  };
}

/** "8" or, for a gang, "16 (2 × 8)": the total, and workers × GPUs each. */
function gpusText(j) {
  const g = (v) => num(v, v % 1 ? 1 : 0);
  return j.workers > 1 ? `${g(j.gpus)} (${j.workers} × ${g(j.gpus / j.workers)})` : g(j.gpus);
}

function jobsTable(jobs) {
  const rows = jobs.map((j) => {
    const ran = j.start_time ? (j.end_time || now()) - j.start_time : null;
    const nodes = [...new Set(j.placement.map((p) => p.node))];
    return tr(jobLink(j.id), j.name, j.user, j.queue, badge(j.state),
      gpusText(j),
      clock(j.submit_time), ran === null ? `waiting ${dur(now() - j.submit_time)}` : dur(ran),
      h("td", {}, nodes.flatMap((n, i) => (i ? [", ", nodeLink(n)] : [nodeLink(n)]))),
      j.reason ? reasonCell(j.reason) : h("td", {}));
  });
  return section(`${jobs.length} job${jobs.length === 1 ? "" : "s"}`, table(["Job", "Name",
    "User", "Queue", "State", "GPUs", "Submitted", "Run time", "Nodes", "Reason"], rows,
  "no job matches"));
}

function jobPage(id) {
  const head = slot();
  const place = slot();
  const events = slot();
  const rank = h("select", { id: "log-rank" }, h("option", { value: "0" }, "rank 0"));
  const stream = h("select", { id: "log-stream" }, h("option", { value: "stdout" }, "stdout"),
    h("option", { value: "stderr" }, "stderr"));
  const pre = h("pre", { class: "log", id: "log" });
  const logState = { key: "", offset: 0, text: "" };
  const resetLog = () => {
    logState.key = "";
    tick(app.gen);
  };
  rank.addEventListener("change", resetLog);
  stream.addEventListener("change", resetLog);
  const logs = section("Logs", h("div", { class: "filters" }, rank, stream), pre);
  logs.hidden = true; // until the job is read
  return {
    el: page(`Job ${id}`, h("p", {}, link("#/jobs", "← all jobs")), head, place, events, logs),
    async refresh(current) {
      const j = await api(`/jobs/${encodeURIComponent(id)}`);
      if (!current()) return;
      head.replaceChildren(jobHead(j));
      place.replaceChildren(placementTable(j));
      events.replaceChildren(eventsTable(j.events || []));
      logs.hidden = false;
      if (rank.options.length !== j.workers) {
        const keep = rank.value;
        rank.replaceChildren(...Array.from({ length: j.workers }, (_, r) =>
          h("option", { value: String(r) }, `rank ${r}`)));
        rank.value = Number(keep) < j.workers ? keep : "0";
      }
      await readLog(j, rank.value, stream.value, logState, pre, current);
    },
  };
}

async function readLog(j, rank, stream, st, pre, current) {
  if (j.attempt === 0) {
    pre.textContent = "(not started yet)";
    return;
  }
  const key = `${j.attempt}/${rank}/${stream}`;
  if (st.key !== key) Object.assign(st, { key, offset: 0, text: "" });
  for (let pages = 0; pages < 4; pages++) { // at most 4 MiB a refresh
    const out = await api(`/jobs/${encodeURIComponent(j.id)}/logs` +
      `${qs({ rank, stream, offset: st.offset })}`);
    if (!current() || st.key !== key) return;
    st.text = (st.text + out.data).slice(-256 * 1024); // the tail only
    st.offset = out.next_offset;
    if (!out.data) break;
  }
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  const shown = st.text || "(nothing written yet)";
  if (pre.textContent !== shown) {
    pre.textContent = shown;
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }
}

function jobHead(j) {
  const dl = (pairs) => h("dl", { class: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k),
    h("dd", {}, v)]));
  const cmd = Array.isArray(j.spec.command) ? j.spec.command.join(" ") : String(j.spec.command || "");
  const facts = dl([
    ["State", badge(j.state)], ["Name", j.name], ["User", j.user], ["Queue", j.queue],
    ["GPUs", `${gpusText(j)} · ${j.workers} worker${j.workers === 1 ? "" : "s"}`],
    ["Attempt", `${j.attempt} (${j.retries_used} retries used)`],
    ["Submitted", clock(j.submit_time)], ["Started", clock(j.start_time)],
    ["Ended", clock(j.end_time)], ["Command", h("code", {}, cmd)],
  ]);
  const reason = j.reason ? h("div", { class: "reason-box" }, h("strong", {}, "Waiting: "),
    badge(j.reason.code, "reason"), " ", j.reason.message,
    j.reason.estimated_start ? h("div", {}, `Estimated start: ${estimatedStart(j.reason)}`)
      : null) : null;
  return section("Details", facts, reason);
}

function placementTable(j) {
  const rows = j.placement.map((p, r) => tr(String(r), nodeLink(p.node), p.gpus.join(", ") || "–",
    `${num(p.gpu_milli / 10)}% each`, num(p.cpu_milli / 1000, 1), `${num(p.memory_mib / 1024, 1)} GiB`));
  return section("Placement", table(["Rank", "Node", "GPUs", "GPU share", "CPU cores", "Memory"],
    rows, j.state === "PENDING" ? "not placed yet" : "no placement"));
}

function eventsTable(events) {
  const rows = events.slice().reverse().map((e) => tr(clock(e.time), String(e.attempt),
    badge(e.state), h("td", { class: "why" }, e.why)));
  return section("Events", table(["Time", "Attempt", "State", "Why"], rows, "no event"));
}

// ----- services ------------------------------------------------------------------------

const serviceLink = (name) => link(`#/services/${encodeURIComponent(name)}`, name);

function servicesPage(name) {
  return name ? servicePage(name) : serviceListPage();
}

function serviceStatus(s) {
  if (s.deleting) return badge("deleting", "cancelled");
  if (s.desktop && s.desktop.suspended) return badge("suspended", "pending");
  if (s.rolling_out) return badge(`rolling out (from ${s.previous_generation})`, "starting");
  if (s.ready >= s.desired) return badge("ready", "running");
  // short of ready replicas: "starting" only while each one short is still coming up; one
  // that fails its probes (or exits) makes the service degraded, not starting
  const coming = (r) => ["PENDING", "STARTING"].includes(r.state) || r.readiness === "waiting";
  const short = (s.replicas || []).filter((r) => !r.stopping && !r.ready);
  if (short.every(coming)) return badge("starting", "pending");
  return badge(s.ready ? `degraded (${s.ready}/${s.desired} ready)` : "down", "failed");
}

// a desktop session's login page on the gateway (its owner signs in with their own token);
// only an http(s) URL becomes a link
function desktopOpen(s) {
  const url = s.desktop && s.desktop.open_url;
  if (!url || !/^https?:\/\//.test(url)) return "–";
  return h("a", { href: url, target: "_blank", rel: "noopener noreferrer", class: "desktop-open" },
    "open desktop");
}

// what a service runs: a desktop says so, with its link
const serviceRuns = (s) => (s.desktop
  ? h("td", { class: "why" }, "desktop ", desktopOpen(s))
  : h("td", { class: "why" }, s.image || s.command.join(" ")));

// a probe's state, coloured: "none" is no probe at all
const PROBE_KINDS = { passing: "running", waiting: "pending", failing: "warn", failed: "failed" };
const probeBadge = (p) => (p === "none" ? "none" : badge(p, PROBE_KINDS[p]));

function serviceListPage() {
  const list = slot();
  return {
    el: page("Services", list),
    async refresh(current) {
      const svcs = await api("/services");
      if (!current()) return;
      const rows = svcs.map((s) => tr(serviceLink(s.name), s.user, s.queue,
        `${s.ready}/${s.desired}`, String(s.generation),
        s.request_rate === null || s.request_rate === undefined ? "–" : num(s.request_rate, 1),
        serviceStatus(s), serviceRuns(s)));
      list.replaceChildren(section(`${svcs.length} service${svcs.length === 1 ? "" : "s"}`,
        table(["Service", "User", "Queue", "Ready", "Generation", "Req/s", "Status", "Runs"],
          rows, "no services")));
    },
  };
}

function servicePage(name) {
  const head = slot();
  const replicas = slot();
  const events = slot();
  return {
    el: page(`Service ${name}`, h("p", {}, link("#/services", "← all services")), head,
      replicas, events),
    async refresh(current) {
      const s = await api(`/services/${encodeURIComponent(name)}`);
      if (!current()) return;
      const auto = s.autoscale;
      head.replaceChildren(section("Service", h("dl", { class: "facts" },
        [["Status", serviceStatus(s)], ["User", s.user], ["Queue", s.queue],
          ["Replicas", `${s.ready} ready, ${s.live} live, ${s.desired} desired`],
          ["Autoscale", auto ? `${auto.min}–${auto.max} at ${auto.target_qps_per_replica} req/s `
            + "per replica" : "off"],
          ["Request rate", s.request_rate === null || s.request_rate === undefined ? "–"
            : `${num(s.request_rate, 1)} req/s`],
          ["Endpoint", s.endpoint ? s.endpoint.url : "none (the controller runs no gateway)"],
          ...(s.desktop ? [["Desktop", desktopOpen(s)], ["Screen", s.desktop.geometry],
            ["Idle limit", `${s.desktop.idle_suspend_s} s, then suspended`]] : []),
          ["Generation", String(s.generation)], ["Runs", s.image || s.command.join(" ")],
          ["Note", s.note || "–"]]
          .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))));
      // a replica killed for its liveness probe is still RUNNING until its Kill lands: shown
      // as failed, with why, not as a running replica
      const state = (r) => (r.failed ? badge("failed", "failed")
        : r.stopping ? badge("stopping", "cancelled") : badge(r.state));
      const rows = s.replicas.map((r) => tr(jobLink(r.job_id), String(r.generation), state(r),
        r.node ? nodeLink(r.node) : "–", r.port ? String(r.port) : "–",
        // ready: the core routes it; routed false: the proxy's reload is not done yet
        !r.ready ? badge("not ready", "pending")
          : r.routed === false ? badge("ready, reloading", "pending") : badge("ready", "running"),
        probeBadge(r.readiness), probeBadge(r.liveness), h("td", { class: "why" }, r.failed)));
      replicas.replaceChildren(section("Replicas", table(["Replica", "Generation", "State",
        "Node", "Port", "Traffic", "Readiness", "Liveness", "Why"], rows, "no replicas")));
      const evs = (s.events || []).slice().reverse().map((e) => tr(clock(e.time), e.what,
        h("td", { class: "why" }, e.why)));
      events.replaceChildren(section("Events", table(["Time", "What", "Why"], evs, "no event")));
    },
  };
}

// ----- nodes ---------------------------------------------------------------------------

const CHARTS = [
  ["DCGM_FI_DEV_GPU_UTIL", "Utilization", "%", 1, [0, 100]],
  ["DCGM_FI_DEV_GPU_TEMP", "Temperature", "°C", 1, null],
  ["DCGM_FI_DEV_POWER_USAGE", "Power", "W", 1, null],
  ["DCGM_FI_DEV_FB_USED", "Memory used", "GiB", 1 / 1024, null],
];

function nodesPage(name) {
  const list = h("nav", { class: "node-list card" });
  const detail = slot("node-detail");
  return {
    el: page(name ? `Node ${name}` : "Nodes", h("div", { class: "split" }, list, detail)),
    async refresh(current) {
      const c = await api("/dashboard/cluster");
      if (!current()) return;
      app.skew = c.time - Date.now() / 1000;
      const chosen = name || (c.nodes[0] && c.nodes[0].name);
      list.replaceChildren(...c.nodes.map((n) => h("a", {
        href: `#/nodes/${encodeURIComponent(n.name)}`,
        class: n.name === chosen ? "active" : null,
      }, h("span", {}, n.name), badge(n.state))));
      const node = c.nodes.find((n) => n.name === chosen);
      if (!node) {
        detail.replaceChildren(section("Nodes", h("p", { class: "muted" },
          name ? `no node ${name}` : "no node has registered")));
        return;
      }
      const hist = await api(`/nodes/${encodeURIComponent(chosen)}/history`);
      if (!current()) return;
      detail.replaceChildren(nodeHead(node), chartsSection(hist), gpuTable(node),
        nodeEvents(hist.events));
    },
  };
}

function nodeHead(n) {
  const jobs = [...new Set(n.gpus.flatMap((g) => g.jobs))];
  return section(`${n.name}`, h("dl", { class: "facts" }, [
    ["State", h("span", {}, badge(n.state), n.why ? ` ${n.why}` : "")],
    ["GPUs", `${n.gpus.length} × ${n.gpu_model}`],
    ["Free", `${num(n.gpus.reduce((a, g) => a + 1 - g.alloc, 0), 1)} GPUs, ` +
      `${num(n.cpu_free, 1)} / ${num(n.cpu_cores)} cores, ` +
      `${num(n.memory_free_gib)} / ${num(n.memory_gib)} GiB`],
    ["Driver / CUDA", `${n.driver_version || "–"} / ${n.cuda_version || "–"}`],
    ["Leaf / pod", `${n.leaf} / ${n.pod}`], ["Last heartbeat", ago(n.last_heartbeat)],
    ["Jobs", jobs.length ? h("span", {}, jobs.flatMap((j, i) => (i ? [", ", jobLink(j)]
      : [jobLink(j)]))) : "none"],
  ].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
}

function chartsSection(hist) {
  const gpus = [...new Set(Object.values(hist.series).flatMap((s) => Object.keys(s)))]
    .sort((a, b) => a - b);
  const legend = h("div", { class: "legend" }, gpus.map((g) => {
    const sw = h("span", { class: "swatch" });
    sw.style.background = GPU_COLORS[g % GPU_COLORS.length];
    return h("span", { class: "key" }, sw, `GPU ${g}`);
  }));
  const span = hist.times.length > 1 ? hist.times[hist.times.length - 1] - hist.times[0] : 0;
  const charts = h("div", { class: "charts" }, CHARTS.map(([metric, title, unit, k, range]) =>
    lineChart(`${title} (${unit})`, hist.times, hist.series[metric] || {}, k, range)));
  return section(`GPU metrics over the last ${dur(span)} (${hist.times.length} samples)`,
    legend, charts);
}

/** The smallest of 1, 2, 2.5, 5 × 10^k that is at least ``v``: a round top for an axis. */
function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((x) => x >= v);
}

function lineChart(title, times, series, k, range) {
  const W = 460, H = 170, L = 40, R = 8, T = 8, B = 22;
  const vals = Object.values(series).flat().filter((v) => v !== null).map((v) => v * k);
  const [lo, hi] = range || [0, niceCeil(Math.max(1, ...vals))];
  const t0 = times[0], t1 = times[times.length - 1];
  const x = (t) => L + (times.length > 1 ? ((t - t0) / (t1 - t0)) * (W - L - R) : 0);
  const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  const text = (tx, ty, s, anchor) => svg("text", { x: tx, y: ty, "text-anchor": anchor || "end",
    class: "tick" }, document.createTextNode(s));
  const el = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-label": title });
  for (const f of [0, 0.5, 1]) {
    const v = lo + f * (hi - lo);
    el.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }),
      text(L - 4, y(v) + 4, v.toFixed(v % 1 ? 1 : 0)));
  }
  if (times.length) {
    el.append(text(L, H - 6, clock(t0), "start"), text(W - R, H - 6, clock(t1), "end"));
  }
  for (const [g, vs] of Object.entries(series)) {
    let pts = [];
    const flush = () => {
      if (pts.length) {
        el.append(svg("polyline", { points: pts.join(" "), class: "series",
          stroke: GPU_COLORS[g % GPU_COLORS.length] }));
      }
      pts = [];
    };
    vs.forEach((v, i) => (v === null ? flush() : pts.push(`${x(times[i]).toFixed(1)},` +
      `${y(v * k).toFixed(1)}`)));
    flush();
  }
  if (!times.length) el.append(text(W / 2, H / 2, "no samples yet", "middle"));
  return h("figure", { class: "chart-box" }, h("figcaption", {}, title), el);
}

function gpuTable(n) {
  const rows = n.gpus.map((g) => tr(String(g.index), g.healthy ? "ok" : badge("unhealthy"),
    `${num(g.util)}%`, `${num(g.temp)} °C`, `${num(g.power)} W`,
    `${num(g.fb_used / 1024, 1)} GiB`, pct(g.alloc), String(g.xid || 0),
    h("td", {}, g.jobs.flatMap((j, i) => (i ? [", ", jobLink(j)] : [jobLink(j)])))));
  return section("GPUs now", table(["GPU", "Health", "Util", "Temp", "Power", "Memory used",
    "Allocated", "Last XID", "Jobs"], rows));
}

function nodeEvents(events) {
  const rows = events.slice().reverse().map((e) => tr(clock(e.time), badge(e.what),
    h("td", { class: "why" }, e.why)));
  return section("Node events", table(["Time", "Event", "Why"], rows, "no event"));
}

// ----- start ---------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", onLoginSubmit);
  $("logout").addEventListener("click", () => showLogin("Signed out."));
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => !document.hidden && tick(app.gen));
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return showLogin("");
  signIn(token).catch((e) => showLogin(`Signed out: ${e.message}`));
});
