// The edge-agent status page: opens on the agent's last minutes
// (/status/history), then polls /status, renders the tables and keeps the
// last minutes of lag, backlog and uplink rate in bounded ring buffers for
// the plots (uPlot). No other dependency, nothing from the network but
// the agent itself.
"use strict";

const params = new URLSearchParams(location.search);
const INTERVAL_MS = Math.max(200, Number(params.get("interval") || 1000));
const HISTORY = 600; // points kept per series: 10 minutes at 1 s

// page is read by the browser test: how many polls, points and errors.
const page = window.edgePage = { polls: 0, failures: 0, points: 0, seeded: 0, streams: [], lastTime: "" };

const fmtInt = (n) => (n == null ? "–" : Math.round(n).toLocaleString("en-US"));
const fmtSec = (s) => (s == null ? "–" : s < 100 ? s.toFixed(1) + " s" : Math.round(s).toLocaleString("en-US") + " s");
function fmtBytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? Math.round(n) : n.toFixed(1)) + " " + u[i];
}
const fmtRate = (n) => (n == null ? "–" : fmtBytes(n) + "/s");

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

function cell(tr, key, text, cls) {
  const td = el("td", { "data-k": key }, text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

// Ring is a bounded series of numbers (null for a gap).
class Ring {
  constructor(n) { this.n = n; this.a = []; }
  push(v) { this.a.push(v); if (this.a.length > this.n) this.a.shift(); }
}

const hist = { t: new Ring(HISTORY), series: new Map() }; // key -> Ring
function ring(key) {
  let r = hist.series.get(key);
  if (!r) {
    r = new Ring(HISTORY);
    for (let i = 0; i < hist.t.a.length; i++) r.push(null); // align with t
    hist.series.set(key, r);
  }
  return r;
}

// prev keeps the last counters to turn them into rates.
let prev = null;

const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"];
const plots = {};

function makePlot(id, series, fmt) {
  const div = document.getElementById(id);
  div.textContent = "";
  const width = Math.max(300, div.clientWidth || 380);
  const opts = {
    width, height: 180,
    scales: { x: { time: true } },
    legend: { live: false },
    series: [{}].concat(series),
    axes: [{}, { size: 70, values: fmt ? (u, vals) => vals.map(fmt) : undefined }],
  };
  const data = [[]].concat(series.map(() => []));
  return { u: new uPlot(opts, data, div), div, keys: series.map((s) => s.key) };
}

function ensurePlots(streams) {
  const names = streams.join(",");
  if (page.streams.join(",") === names) return;
  page.streams = streams.slice();
  const lag = [], backlog = [], uplink = [{ label: "total", key: "uplink/total", stroke: "#1d2330", width: 2 }];
  streams.forEach((s, i) => {
    const c = palette[i % palette.length];
    lag.push({ label: s + " committed", key: "lagc/" + s, stroke: c, width: 2 });
    lag.push({ label: s + " local", key: "lagl/" + s, stroke: c, dash: [5, 4] });
    backlog.push({ label: s, key: "backlog/" + s, stroke: c, width: 2 });
    uplink.push({ label: s, key: "uplink/" + s, stroke: c });
  });
  plots.lag = makePlot("plot-lag", lag);
  plots.backlog = makePlot("plot-backlog", backlog);
  plots.uplink = makePlot("plot-uplink", uplink, fmtBytes);
}

function streamKeys(streams) {
  const keys = ["uplink/total"];
  for (const n of streams) keys.push("lagc/" + n, "lagl/" + n, "backlog/" + n, "uplink/" + n);
  return keys;
}

// seed fills the plots with the agent's last minutes (/status/history)
// before the first poll, so that the page opens on the recent past.
async function seed() {
  try {
    const resp = await fetch("status/history", { cache: "no-store" });
    if (!resp.ok) return;
    const h = await resp.json();
    const names = Object.keys(h.streams || {}).sort();
    ensurePlots(names);
    streamKeys(names).forEach(ring);
    for (let i = 0; i < h.time.length; i++) {
      hist.t.push(h.time[i]);
      const dt = i > 0 ? h.time[i] - h.time[i - 1] : 0;
      let total = 0, have = false;
      for (const n of names) {
        const c = h.streams[n];
        ring("lagc/" + n).push(c.committed_lag_seconds[i]);
        ring("lagl/" + n).push(c.local_lag_seconds[i]);
        ring("backlog/" + n).push(c.backlog_events[i]);
        const b = c.replicated_bytes[i], pb = i > 0 ? c.replicated_bytes[i - 1] : null;
        const up = b != null && pb != null && dt > 0 ? Math.max(0, (b - pb) / dt) : null;
        ring("uplink/" + n).push(up);
        if (up != null) { total += up; have = true; }
      }
      ring("uplink/total").push(have ? total : null);
    }
    if (h.time.length) { // the first poll's rates continue from the last sample
      const last = h.time.length - 1;
      prev = { t: h.time[last], repl: {}, drones: {} };
      for (const n of names) prev.repl[n] = h.streams[n].replicated_bytes[last];
    }
    page.seeded = h.time.length;
    page.points = hist.t.a.length;
    redraw();
  } catch (e) {
    page.seedError = String(e);
  }
}

function redraw() {
  for (const p of Object.values(plots)) {
    const data = [hist.t.a.slice()].concat(p.keys.map((k) => ring(k).a.slice()));
    p.u.setData(data);
    p.div.setAttribute("data-points", String(hist.t.a.length));
  }
}

function render(s) {
  const now = Date.parse(s.time) / 1000;
  const dt = prev ? now - prev.t : 0;
  const rate = (cur, old) => (prev && dt > 0 && old != null ? Math.max(0, (cur - old) / dt) : null);

  document.getElementById("agent").textContent = s.agent;
  document.getElementById("central").textContent = s.central || "(replication off)";
  const cs = document.getElementById("central-state");
  cs.textContent = s.central ? (s.central_connected ? "connected" : "disconnected") : "off";
  cs.className = "pill " + (s.central ? (s.central_connected ? "ok" : "bad") : "");
  document.getElementById("uptime").textContent = fmtSec(s.uptime_seconds);
  document.getElementById("procs-box").hidden = !s.procs;
  if (s.procs) {
    document.getElementById("procs").textContent =
      `${s.procs.gomaxprocs} of ${s.procs.max} Ps` + (s.procs.sized ? " (sized to the load)" : "");
  }
  document.getElementById("updated").textContent = new Date(s.time).toLocaleTimeString();

  // Streams.
  const streams = (s.streams || []).map((x) => x.name);
  ensurePlots(streams);
  streamKeys(streams).forEach(ring); // a new series is padded before the time advances
  hist.t.push(now);
  const tb = document.querySelector("#streams tbody");
  tb.textContent = "";
  const cur = { t: now, repl: {}, drones: {} };
  let total = 0, haveTotal = false;
  for (const st of s.streams || []) {
    const r = st.replication || {};
    const tr = el("tr", { "data-stream": st.name });
    cell(tr, "name", st.name);
    const state = r.state || "local only";
    cell(tr, "state", state, state === "replicating" ? "" : "warnText");
    cell(tr, "committed_lag", fmtSec(st.committed_lag_seconds));
    cell(tr, "local_lag", fmtSec(st.local_lag_seconds));
    cell(tr, "backlog_events", fmtInt(r.backlog_events));
    cell(tr, "backlog_bytes", fmtBytes(r.backlog_bytes));
    const cu = st.catch_up;
    cell(tr, "behind", cu ? fmtSec(cu.behind_seconds) : "–");
    cell(tr, "eta", !cu ? "–" : cu.eta_seconds != null ? fmtSec(cu.eta_seconds) : "not catching up",
      cu && cu.eta_seconds == null ? "warnText" : "");
    cell(tr, "appended", fmtInt(st.stats && st.stats.appended));
    cell(tr, "replicated", fmtInt(r.events));
    cur.repl[st.name] = r.bytes;
    const up = rate(r.bytes, prev && prev.repl[st.name]);
    cell(tr, "uplink", fmtRate(up));
    if (up != null) { total += up; haveTotal = true; }
    tb.appendChild(tr);
    ring("lagc/" + st.name).push(st.committed_lag_seconds ?? null);
    ring("lagl/" + st.name).push(st.local_lag_seconds ?? null);
    ring("backlog/" + st.name).push(r.backlog_events ?? null);
    ring("uplink/" + st.name).push(up);
  }
  ring("uplink/total").push(haveTotal ? total : null);
  // Series of streams that went away still advance, as gaps.
  for (const [k, r] of hist.series) if (r.a.length < hist.t.a.length) r.push(null);

  renderUplink(s);
  renderLive(s);
  renderDrones(s, cur, rate);
  renderSources(s);
  renderHost(s);
  renderErrors(s);
  prev = cur;
  page.polls++;
  page.points = hist.t.a.length;
  page.lastTime = s.time;
  redraw();
}

// renderLive shows the live lane: each drone's latest value goes ahead of
// the backlog inside its share of the uplink cap (docs/live.md).
function renderLive(s) {
  const l = s.live;
  document.getElementById("live-box").hidden = !l;
  if (!l) return;
  document.getElementById("live-share").textContent =
    l.share_bytes_per_sec ? "at most " + fmtRate(l.share_bytes_per_sec) + " of the uplink cap" : "no uplink cap";
  const tb = document.querySelector("#live tbody");
  tb.textContent = "";
  const now = Date.parse(s.time);
  for (const x of l.streams || []) {
    const tr = el("tr", { "data-live": x.stream });
    cell(tr, "stream", x.stream + (x.keyframes ? " (keyframes)" : ""));
    cell(tr, "interval", fmtSec(x.interval_seconds));
    cell(tr, "drones", fmtInt(x.drones));
    cell(tr, "sent", fmtInt(x.sent));
    cell(tr, "bytes", fmtBytes(x.bytes));
    cell(tr, "last_sent", x.last_sent ? fmtSec(Math.max(0, (now - Date.parse(x.last_sent)) / 1000)) + " ago" : "never");
    const bad = (x.publish_errors || 0) + (x.too_large || 0) + (x.drones_refused || 0) + (x.undecodable || 0);
    // Values wait that the lane cannot send (the centre away, a publish
    // refused): a problem however few errors it counted.
    const stalled = x.not_delivering_since
      ? "not delivering since " + new Date(x.not_delivering_since).toLocaleTimeString() + " (" +
        fmtSec(Math.max(0, (now - Date.parse(x.not_delivering_since)) / 1000)) + ")" : "";
    cell(tr, "problems", stalled ? stalled + (bad > 0 ? ", " + fmtInt(bad) + " errors" : "") : fmtInt(bad),
      bad > 0 || stalled ? "warnText" : "");
    tb.appendChild(tr);
  }
}

function renderDrones(s, cur, rate) {
  const dev = s.devices || {};
  const drones = dev.drones || [];
  const video = (s.video && s.video.per_drone) || {};
  const mav = {};
  for (const m of (s.mavlink && s.mavlink.drones) || []) mav[m.drone] = m;
  document.getElementById("drone-count").textContent =
    drones.length + " known, " + drones.filter((d) => d.online).length + " online";
  const tb = document.querySelector("#drones tbody");
  tb.textContent = "";
  const now = Date.parse(s.time);
  for (const d of drones) {
    const tr = el("tr", { "data-drone": d.id });
    cell(tr, "id", d.id);
    const st = cell(tr, "online", "");
    st.appendChild(el("span", { class: "pill " + (d.online ? "ok" : "bad") }, d.online ? "online" : "offline"));
    const ago = d.last_seen ? (now - Date.parse(d.last_seen)) / 1000 : null;
    cell(tr, "last_seen", ago == null ? "never" : fmtSec(Math.max(0, ago)) + " ago");
    cur.drones[d.id] = { events: d.events, bytes: d.bytes };
    const p = prev && prev.drones[d.id];
    cell(tr, "events_rate", rate(d.events, p && p.events) == null ? "–" : rate(d.events, p.events).toFixed(1));
    cell(tr, "bytes_rate", fmtRate(rate(d.bytes, p && p.bytes)));
    cell(tr, "events", fmtInt(d.events));
    cell(tr, "bytes", fmtBytes(d.bytes));
    const v = video[d.id];
    const m = mav[d.id];
    const drops = (v ? (v.lost || 0) + (v.frames_dropped || 0) : 0) + (m ? m.lost || 0 : 0);
    cell(tr, "drops", fmtInt(drops), drops > 0 ? "warnText" : "");
    cell(tr, "vehicle", m ? vehicleText(m.vehicle) : "–");
    tb.appendChild(tr);
  }
  if (!drones.length) {
    const tr = el("tr");
    tr.appendChild(el("td", { colspan: "9" }, "no drone seen yet"));
    tb.appendChild(tr);
  }
}

// renderSources shows each RTSP source: connecting, streaming, or failing
// since when and why (the agent's redactor has removed any password).
function renderSources(s) {
  const sources = (s.video && s.video.sources) || [];
  document.getElementById("sources-box").hidden = !sources.length;
  const tb = document.querySelector("#sources tbody");
  tb.textContent = "";
  const now = Date.parse(s.time);
  for (const src of sources) {
    const tr = el("tr", { "data-source": src.drone });
    cell(tr, "drone", src.drone);
    const cls = { streaming: "ok", connecting: "warn", failing: "bad" }[src.state] || "";
    const st = cell(tr, "state", "");
    st.appendChild(el("span", { class: "pill " + cls }, src.state === "failing" ? "failing since " + new Date(src.since).toLocaleTimeString() : src.state));
    const ago = src.since ? (now - Date.parse(src.since)) / 1000 : null;
    cell(tr, "for", ago == null ? "–" : fmtSec(Math.max(0, ago)));
    cell(tr, "url", src.url);
    cell(tr, "transport", src.transport || "–");
    cell(tr, "codec", src.codec || "–");
    cell(tr, "reconnects", fmtInt(src.reconnects));
    cell(tr, "rtp", fmtInt(src.rtp));
    cell(tr, "last_error", src.last_error || "–", src.state === "failing" ? "warnText" : "");
    tb.appendChild(tr);
  }
}

// vehicleText is a MAVLink drone's autopilot state: armed, mode, battery, position.
function vehicleText(v) {
  if (!v) return "–";
  const parts = [(v.armed ? "ARMED" : "disarmed") + (v.mode ? " " + v.mode : "")];
  if (v.battery_pct >= 0) parts.push("battery " + v.battery_pct + " %");
  if (v.position_unix_ns) parts.push(v.lat.toFixed(5) + ", " + v.lon.toFixed(5) + " " + v.alt_m.toFixed(0) + " m");
  return parts.join(" · ");
}

function renderHost(s) {
  const dev = s.devices || {};
  const h = dev.health || {};
  const disk = dev.disk || {};
  const rows = [
    ["cpu", h.cpu ? h.cpu.percent.toFixed(0) + " % of " + h.cpu.count + " cores" : "–"],
    ["load", h.load ? [h.load.load1, h.load.load5, h.load.load15].map((x) => x.toFixed(2)).join(" ") : "–"],
    ["memory", h.mem ? h.mem.used_percent.toFixed(0) + " % used, " + fmtBytes(h.mem.available) + " available" : "–"],
    ["disk", disk.total_bytes ? fmtBytes(disk.free_bytes) + " free of " + fmtBytes(disk.total_bytes) : "–"],
    ["disk state", disk.state || "–"],
    ["store free", fmtBytes(s.store && s.store.free_bytes)],
    ["disk-full rejects", fmtInt(s.store && s.store.disk_full_rejects)],
  ];
  const tb = document.querySelector("#host tbody");
  tb.textContent = "";
  for (const [k, v] of rows) {
    const tr = el("tr");
    tr.appendChild(el("th", {}, k));
    cell(tr, k.replace(/[^a-z]+/g, "_"), v, k === "disk state" && v !== "ok" && v !== "–" ? "warnText" : "");
    tb.appendChild(tr);
  }
}

// renderUplink shows the link to the centre: the cap and its use on the
// wire, and during an outage since when, why, how much waits and when it
// will all be at the centre (at the current rate, or at the cap while
// nothing is sent).
function renderUplink(s) {
  const u = s.uplink;
  document.getElementById("uplink-box").hidden = !u;
  if (!u) return;
  document.getElementById("uplink-cap").textContent = u.cap_bytes_per_sec
    ? "cap " + fmtRate(u.cap_bytes_per_sec) + ", charged on the wire" : "no cap";
  const o = document.getElementById("outage");
  o.hidden = !u.down;
  if (u.down) {
    o.textContent = (u.never_connected ? "never connected" : "centre down") + " since " +
      new Date(u.down_since).toLocaleTimeString() + " (" + fmtSec(u.down_seconds) + "): " + u.cause;
  }
  const row = document.querySelector("#uplink tbody tr");
  const set = (k, v) => { row.querySelector(`td[data-k="${k}"]`).textContent = v; };
  set("uplink_rate", fmtRate(u.send_bytes_per_sec) +
    (u.cap_use != null ? " (" + Math.round(100 * u.cap_use) + " % of the cap)" : ""));
  set("uplink_backlog", fmtInt(u.backlog_events) + " events, " + fmtBytes(u.backlog_bytes) +
    " (" + fmtBytes(u.backlog_wire_bytes) + " on the wire)");
  // No estimate: while the centre is away with no cap there is no rate
  // to reckon by (the backlog may well drain once it is back); otherwise
  // capture outpaces the link.
  set("uplink_eta", u.eta_seconds != null
    ? (u.backlog_events === 0 ? "complete" : fmtSec(u.eta_seconds) + " at the " + u.eta_basis)
    : u.down && !u.cap_bytes_per_sec ? "unknown while the centre is away (no cap to reckon by)"
    : "not catching up");
}

function renderErrors(s) {
  const ul = document.getElementById("errors");
  ul.textContent = "";
  const errs = Object.entries(s.errors || {}).sort();
  for (const [k, v] of errs) ul.appendChild(el("li", { "data-k": k }, k + ": " + v));
  if (!errs.length) ul.appendChild(el("li", { class: "none" }, "none"));
}

async function poll() {
  const ps = document.getElementById("poll-state");
  try {
    const resp = await fetch("status", { cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    render(await resp.json());
    ps.textContent = "live";
    ps.className = "pill ok";
  } catch (e) {
    page.failures++;
    ps.textContent = "agent unreachable: " + e.message;
    ps.className = "pill bad";
  } finally {
    setTimeout(poll, INTERVAL_MS);
  }
}

window.addEventListener("resize", () => {
  for (const p of Object.values(plots)) p.u.setSize({ width: Math.max(300, p.div.clientWidth), height: 180 });
});
seed().then(poll);
