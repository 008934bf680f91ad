// Odradek web console: a small hash-routed single-page app over the broker's /api JSON.
// Plain JavaScript, no build step; charts use the vendored uPlot (static/vendor/).
'use strict';

const POLL_MS = 5000;
const PALETTE = ['#2f6fde', '#e0582b', '#1f9d6b', '#9b51e0', '#d4a017', '#0e9aa7', '#d6336c',
  '#6b7f99', '#7cb342', '#8d6e63'];

// auth: HTTP Basic credentials for writes, asked for after a 401 (brokers with an authorizer).
const state = { cluster: null, view: null, auth: null, authNeeded: false };

// ---------- small helpers ----------

// h('a', {href: '#/', class: 'x', onclick: fn}, 'text', child, [more]) -> element.
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid != null && kid !== false) el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// replaceChildren that, like h(), flattens arrays and skips null/false.
const fill = (el, ...kids) => el.replaceChildren(...h('div', {}, kids).childNodes);
const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;
const topicHref = (name) => `#/topics/${enc(name)}`;
const groupHref = (id) => `#/groups/${enc(id)}`;

function fmtBytes(n) {
  if (n == null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${Math.round(n)} B` : `${n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
}
const fmtCount = (n) => (n == null ? '–' : n.toLocaleString('en-US'));
// 0.25, 12, 4.5k, 1.2M (charts: short axis labels)
const fmtShort = (v) => (Math.abs(v) >= 1e6 ? `${+(v / 1e6).toFixed(1)}M` : Math.abs(v) >= 1e4 ? `${+(v / 1e3).toFixed(1)}k`
  : `${v < 10 ? +v.toFixed(2) : Math.round(v)}`);
const fmtRate = (unit) => (v) => (v == null ? '–' : `${fmtShort(v)} ${unit}`);
const fmtBps = (v) => (v == null ? '–' : `${fmtBytes(v)}/s`);
const fmtMs = (v) => (v == null ? '–' : `${v < 10 ? +v.toFixed(2) : Math.round(v)} ms`);

// Local time as ISO 8601 with the zone offset, e.g. 2024-05-01T14:03:07.123+02:00.
function isoLocal(ms) {
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  const off = -d.getTimezoneOffset();
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:` +
    `${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}` +
    `${off < 0 ? '-' : '+'}${p(Math.floor(Math.abs(off) / 60))}:${p(Math.abs(off) % 60)}`;
}

const badge = (text, kind = '', title = null) => h('span', { class: `badge ${kind}`, title }, text);
// A numeric cell; raw (when the text is formatted) goes to data-value for scripts and tests.
const num = (v, cls = '', raw = null) => h('td', { class: `num ${cls}`, 'data-value': raw }, v == null ? '–' : v);
const link = (href, text) => h('a', { href }, text);

function table(id, headers) {
  // A header written '#Name' is a numeric column (right-aligned, monospace).
  const ths = headers.map((x) => h('th', { class: x.startsWith('#') ? 'num' : null }, x.replace(/^#/, '')));
  return h('table', { id, class: 'grid' }, h('thead', {}, h('tr', {}, ths)), h('tbody'));
}

function setRows(tbl, rows, emptyText = 'Nothing here.') {
  const cols = tbl.tHead.rows[0].cells.length;
  tbl.tBodies[0].replaceChildren(...(rows.length ? rows
    : [h('tr', { class: 'empty' }, h('td', { colspan: cols }, emptyText))]));
}

const scroll = (el) => h('div', { class: 'scroll' }, el);
const section = (title, ...kids) => h('section', { class: 'card' }, h('h2', {}, title), ...kids);

// ---------- API access ----------

class ApiError extends Error {
  constructor(code, message, status = 0) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

// GET when body is undefined, else POST JSON with the console's CSRF header.
// Every failure (network, non-2xx, non-JSON) becomes an ApiError for the page to display.
async function api(path, body) {
  const init = body === undefined ? { headers: { Accept: 'application/json' } } : {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Odradek-Console': '1',
      ...(state.auth ? { Authorization: `Basic ${state.auth}` } : {}) },
    body: JSON.stringify(body),
  };
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError('NETWORK_ERROR', `Cannot reach the broker (${e.message}).`);
  }
  let data = null;
  try { data = await res.json(); } catch { /* not JSON: handled below */ }
  if (!res.ok) {
    throw new ApiError((data && data.error) || `HTTP_${res.status}`,
      (data && data.message) || res.statusText || 'Request failed', res.status);
  }
  if (data === null) throw new ApiError('BAD_RESPONSE', `${path} did not answer JSON.`, res.status);
  return data;
}

function showError(err) {
  const el = $('#error');
  el.replaceChildren(h('b', {}, err.code || 'ERROR'), ' ', err.message || String(err));
  el.hidden = false;
}

let noticeTimer = 0;
function notice(text) {
  const el = $('#notice');
  el.textContent = text;
  el.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, 4000);
}

const writeEnabled = () => !!(state.cluster && state.cluster.console && state.cluster.console.write_enabled);

// ---------- charts (uPlot) ----------

// Axis steps for byte rates in binary units (1, 2, 5, 10, 25, ... x 1024^k), so labels are round.
const BYTE_INCRS = [0, 1, 2, 3, 4].flatMap((k) => [1, 2, 5, 10, 25, 50, 100, 250, 500].map((m) => m * 1024 ** k));

// A chart container (.chart[data-chart=key]) whose series can change between updates.
// After each draw, data-points holds the number of non-null y values over all series.

function makeChart(view, key, title, fmt, hint, incrs) {
  const plotEl = h('div', { class: 'plot' });
  const emptyEl = h('div', { class: 'chart-empty' }, 'No samples yet');
  const box = h('div', { class: 'chart', 'data-chart': key },
    h('h3', {}, title, hint ? h('small', {}, hint) : null), plotEl, emptyEl);
  let plot = null;
  let signature = '';
  const size = () => ({ width: Math.max(plotEl.clientWidth || 0, 280), height: 200 });

  const chart = {
    box,
    // series: [{label, data, color?, dash?, show?}], t: epoch ms.
    update(t, series) {
      series.forEach((s) => { s.data = s.data || []; });
      const data = [t.map((x) => x / 1000), ...series.map((s) => s.data)];
      const sig = series.map((s) => s.label).join('\n');
      if (plot && sig !== signature) { plot.destroy(); plot = null; } // new API seen: rebuild
      signature = sig;
      if (!plot) {
        plot = new uPlot({
          ...size(),
          series: [{}, ...series.map((s, i) => ({
            label: s.label,
            stroke: s.color || PALETTE[i % PALETTE.length],
            width: 1.5,
            dash: s.dash,
            show: s.show !== false,
            points: { show: false },
            value: (u, v) => fmt(v),
          }))],
          // Axis width follows its longest label (about 7 px a character at 12 px).
          axes: [{}, { incrs, values: (u, vals) => vals.map(fmt),
            size: (u, vals) => 24 + 7 * Math.max(4, ...(vals || []).map((v) => String(v).length)) }],
          // Rates and lags are never negative: anchor the y axis at 0.
          scales: { y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
          cursor: { drag: { x: true, y: false } },
        }, data, plotEl);
      } else {
        // While the user is zoomed in (drag), keep that window; double-click zooms out again.
        const x = plot.scales.x;
        const old = plot.data[0];
        const zoomed = old.length > 1 && (x.min > old[0] || x.max < old[old.length - 1]);
        plot.setData(data, !zoomed);
      }
      const points = series.reduce((n, s) => n + s.data.filter((v) => v != null).length, 0);
      box.dataset.points = String(points);
      emptyEl.hidden = points > 0;
      plotEl.style.visibility = points > 0 ? '' : 'hidden'; // empty axes only confuse
    },
    resize() { if (plot) plot.setSize(size()); },
    destroy() { if (plot) plot.destroy(); plot = null; },
  };
  view.charts.push(chart);
  return chart;
}

// ---------- routing and polling ----------

const routes = [
  [/^\/?$/, 'overview', overviewView],
  [/^\/topics\/?$/, 'topics', topicsView],
  [/^\/topics\/(.+)$/, 'topics', topicView],
  [/^\/groups\/?$/, 'groups', groupsView],
  [/^\/groups\/(.+)$/, 'groups', groupView],
];

function route() {
  const path = location.hash.replace(/^#/, '') || '/';
  if (state.view) {
    state.view.alive = false;
    state.view.charts.forEach((c) => c.destroy());
  }
  $('#error').hidden = true;
  document.querySelectorAll('dialog').forEach((d) => d.remove());
  const main = $('#main');
  main.replaceChildren();
  const view = { alive: true, busy: false, charts: [], refresh: async () => {} };
  // Fetch several endpoints; if the user navigated away meanwhile, never settle (drop the answer).
  // A path starting with '?' is optional (history): its failure gives empty history, not an error.
  view.get = async (...paths) => {
    const out = await Promise.all(paths.map((p) => (p.startsWith('?') ? api(p.slice(1)).catch(() => ({ t: [] })) : api(p))));
    return view.alive ? out : new Promise(() => {});
  };
  state.view = view;
  const match = routes.find(([re]) => re.test(path));
  if (!match) {
    main.append(h('section', { class: 'card' }, h('h1', {}, 'Not found'),
      h('p', {}, 'No page at ', h('code', {}, path), '. ', link('#/', 'Go to the overview.'))));
    document.body.dataset.loaded = 'true';
    return;
  }
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.nav === match[1]));
  let params = [];
  try {
    params = path.match(match[0]).slice(1).map(decodeURIComponent);
  } catch {
    params = path.match(match[0]).slice(1); // malformed %-escape: use as typed
  }
  match[2](main, view, ...params);
  tick(view);
}

function setCluster(c) {
  state.cluster = c;
  $('#cluster-id').textContent = c.cluster_id;
  $('#broker-id').textContent = c.broker_id;
  $('#version').textContent = c.version ? `${c.version} · ${c.mode}` : '';
}

// One poll: cluster header, then the current view. Errors become the page's banner.
async function tick(view = state.view) {
  if (!view || view.busy || document.hidden) return;
  view.busy = true;
  try {
    setCluster(await api('api/cluster'));
    await view.refresh();
    if (view.alive) {
      $('#error').hidden = true;
      $('#status').textContent = `updated ${new Date().toLocaleTimeString()}`;
    }
  } catch (err) {
    if (view.alive && err.status === 404 && view.missing) {
      // The topic or group does not exist (any more): say so instead of showing empty tables.
      view.charts.forEach((c) => c.destroy());
      view.refresh = async () => {};
      $('#main').replaceChildren(h('section', { class: 'card', id: 'not-found' }, h('h1', {}, 'Not found'),
        h('p', {}, h('b', {}, err.code), ' ', err.message), link(...view.missing)));
    } else if (view.alive) showError(err);
  } finally {
    view.busy = false;
    if (view.alive) document.body.dataset.loaded = 'true';
  }
}

// ---------- overview ----------

function statCard(label, value, warnWhenPositive, kind = 'danger') {
  const cls = warnWhenPositive ? (value > 0 ? kind : 'good') : '';
  return h('div', { class: `stat ${cls}`, 'data-stat': label.toLowerCase().replace(/\W+/g, '-') },
    h('div', { class: 'value' }, fmtCount(value)), h('div', { class: 'label' }, label));
}

function overviewView(main, view) {
  const stats = h('div', { class: 'stats' });
  const brokers = table('brokers-table', ['#ID', 'Host:port', 'Rack', 'Role']);
  const grid = h('div', { class: 'charts' });
  const bytes = makeChart(view, 'bytes', 'Bytes in / out', fmtBps, null, BYTE_INCRS);
  const msgs = makeChart(view, 'messages', 'Messages in', fmtRate('msg/s'));
  const reqs = makeChart(view, 'requests', 'Requests per API', fmtRate('req/s'), 'click a legend entry to hide or show it');
  const lat = makeChart(view, 'latency', 'Request latency p50 (dashed) / p99', fmtMs);
  // Latency of every API in one chart gives an unreadable legend: pick APIs with checkboxes.
  const picker = h('div', { class: 'api-picker', id: 'latency-apis' });
  lat.box.insertBefore(picker, lat.box.children[1]);
  const chosen = new Set();
  const known = new Set();
  let lastHist = null;
  picker.addEventListener('change', (ev) => {
    if (ev.target.checked) chosen.add(ev.target.value);
    else chosen.delete(ev.target.value);
    if (lastHist) drawLatency(lastHist);
  });
  // Produce and Fetch (or FetchConsumer/FetchFollower) first, the rest alphabetically.
  const rank = (x) => (x === 'Produce' ? 0 : x.startsWith('Fetch') ? 1 : 2);
  const apiNames = (hist) => Object.keys({ ...hist.requests, ...hist.latency_ms })
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const color = (apis, name) => PALETTE[apis.indexOf(name) % PALETTE.length]; // same colour in both charts
  function drawLatency(hist) {
    const latency = hist.latency_ms || {};
    const apis = apiNames(hist);
    const withLatency = apis.filter((a) => latency[a]);
    withLatency.filter((a) => !known.has(a)).forEach((a) => { known.add(a); if (rank(a) < 2) chosen.add(a); });
    if (picker.dataset.apis !== withLatency.join()) { // rebuild only when the API list changes
      picker.dataset.apis = withLatency.join();
      fill(picker, withLatency.map((a) => h('label', { class: 'chip' },
        h('input', { type: 'checkbox', value: a, checked: chosen.has(a) }),
        h('i', { style: `background:${color(apis, a)}` }), a)));
    }
    lat.update(hist.t, withLatency.filter((a) => chosen.has(a)).flatMap((a) => ['p50', 'p99'].map((q) => ({
      label: `${a} ${q}`, data: latency[a][q], color: color(apis, a), dash: q === 'p50' ? [5, 4] : undefined,
    }))));
  }
  grid.append(bytes.box, msgs.box, reqs.box, lat.box);
  main.append(h('div', { id: 'overview' },
    h('h1', {}, 'Cluster overview'), stats,
    section('Brokers', scroll(brokers)),
    section('This broker (last hour)', h('p', { class: 'muted', id: 'history-note' }), grid)));

  view.refresh = async () => {
    const [hist] = await view.get('?api/history');
    const requests = hist.requests || {};
    const c = state.cluster;
    fill(stats,
      statCard('Brokers', c.brokers.length), statCard('Topics', c.topics),
      statCard('Partitions', c.partitions), statCard('Consumer groups', c.groups),
      statCard('Under-replicated', c.under_replicated, true, 'warn'),
      statCard('Under min ISR', c.under_min_isr, true, 'warn'),
      statCard('Offline', c.offline, true));
    setRows(brokers, c.brokers.map((b) => h('tr', { 'data-broker': b.id },
      num(b.id), h('td', { class: 'mono' }, `${b.host}:${b.port}`), h('td', {}, b.rack ?? '–'),
      h('td', {}, b.controller ? badge('controller', 'accent') : null,
        b.id === c.broker_id ? badge('serving this console') : null))));
    $('#history-note').textContent =
      `Broker ${c.broker_id}, one sample every ${c.console.history_interval_s} s. Drag on a chart to zoom, double-click to reset.`;
    bytes.update(hist.t, [{ label: 'In', data: hist.bytes_in }, { label: 'Out', data: hist.bytes_out }]);
    msgs.update(hist.t, [{ label: 'Messages in', data: hist.messages_in }]);
    const apis = apiNames(hist);
    reqs.update(hist.t, apis.filter((a) => requests[a])
      .map((a) => ({ label: a, data: requests[a], color: color(apis, a) })));
    lastHist = hist;
    drawLatency(hist);
  };
}

// ---------- write dialogs ----------

// A modal form. fields: [{name, label, type?, options?, value?, hint?, showIf?(values)}].
// submit(values) may throw an ApiError; its code and message are shown in the dialog.
function formDialog(title, fields, submit) {
  const err = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const needAuth = () => state.authNeeded;
  fields = [...fields, { name: '_user', label: 'User (SCRAM)', showIf: needAuth, autocomplete: 'username' },
    { name: '_password', label: 'Password', type: 'password', showIf: needAuth, autocomplete: 'current-password' }];
  const rows = fields.map((f) => {
    let input;
    if (f.options) {
      input = h('select', { name: f.name },
        f.options.map(([v, text]) => h('option', { value: v, selected: String(v) === String(f.value) }, text)));
    } else if (f.type === 'textarea') {
      input = h('textarea', { name: f.name, rows: 4, placeholder: f.placeholder });
    } else {
      input = h('input', { name: f.name, type: f.type || 'text', value: f.value, placeholder: f.placeholder,
        required: f.required, min: f.min, step: f.type === 'datetime-local' ? 1 : null, autocomplete: f.autocomplete || 'off' });
    }
    return { f, el: h('label', { class: 'field' }, h('span', {}, f.label), input, f.hint ? h('small', {}, f.hint) : null) };
  });
  const form = h('form', { class: 'dialog-form' }, h('h2', {}, title), rows.map((r) => r.el), err,
    h('div', { class: 'actions' },
      h('button', { type: 'button', onclick: () => dlg.close() }, 'Cancel'),
      h('button', { type: 'submit', class: 'primary' }, title)));
  const dlg = h('dialog', { class: 'dialog', onclose: () => dlg.remove() }, form);
  const values = () => Object.fromEntries(new FormData(form));
  const sync = () => rows.forEach((r) => { if (r.f.showIf) r.el.hidden = !r.f.showIf(values()); });
  form.addEventListener('change', sync);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.hidden = true;
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      const v = values();
      if (state.authNeeded && v._user) {
        const bytes = new TextEncoder().encode(`${v._user}:${v._password}`);
        state.auth = btoa(String.fromCharCode(...bytes));
      }
      const msg = await submit(v);
      dlg.close();
      notice(msg);
      tick();
    } catch (e) {
      if (e.status === 401) { // the broker wants a user: show the credential fields
        state.authNeeded = true;
        sync();
      }
      err.replaceChildren(h('b', {}, e.code || 'ERROR'), ' ', e.message);
      err.hidden = false;
    } finally {
      button.disabled = false;
    }
  });
  sync();
  document.body.append(dlg);
  dlg.showModal();
}

const invalid = (message) => new ApiError('INVALID_INPUT', message);

function intValue(text, what) {
  if (!/^-?\d+$/.test(String(text).trim())) throw invalid(`${what} must be an integer.`);
  return Number(text);
}

function timestampValue(text) {
  const ms = new Date(text).getTime(); // datetime-local values are read as local time
  if (!text || Number.isNaN(ms)) throw invalid('Pick a date and time.');
  return ms;
}

function createTopicDialog() {
  formDialog('Create topic', [
    { name: 'name', label: 'Name', required: true },
    { name: 'partitions', label: 'Partitions', type: 'number', value: 1, min: 1 },
    { name: 'replication_factor', label: 'Replication factor', type: 'number', value: 1, min: 1 },
    { name: 'configs', label: 'Configs (optional)', type: 'textarea', placeholder: 'cleanup.policy=compact\nretention.ms=86400000', hint: 'One key=value per line.' },
  ], async (v) => {
    const configs = {};
    for (const line of v.configs.split('\n').map((l) => l.trim()).filter(Boolean)) {
      const i = line.indexOf('=');
      if (i < 1) throw invalid(`Config line "${line}" is not key=value.`);
      configs[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    const name = v.name.trim();
    await api('api/topics', { name, partitions: intValue(v.partitions, 'Partitions'),
      replication_factor: intValue(v.replication_factor, 'Replication factor'), configs });
    return `Topic ${name} created.`;
  });
}

function deleteRecordsDialog(topic) {
  formDialog('Delete records', [
    { name: 'partition', label: 'Partition', options: [['all', 'All partitions'],
      ...topic.partitions.map((p) => [p.partition, `${p.partition} (log start ${p.log_start_offset}, HW ${p.high_watermark})`])] },
    { name: 'offset', label: 'Delete records before offset', type: 'number', value: -1, min: -1,
      hint: '-1 deletes everything up to the high watermark.' },
  ], async (v) => {
    const offset = intValue(v.offset, 'Offset');
    const parts = v.partition === 'all' ? topic.partitions.map((p) => p.partition) : [Number(v.partition)];
    await api(`api/topics/${enc(topic.name)}/delete-records`,
      { partitions: Object.fromEntries(parts.map((p) => [String(p), offset])) });
    return `Records deleted from ${topic.name}.`;
  });
}

function resetOffsetsDialog(group) {
  const topics = [...new Set([...group.offsets.map((o) => o.topic),
    ...group.members.flatMap((m) => m.assignment.map((a) => a.topic))])].sort();
  formDialog('Reset offsets', [
    { name: 'topic', label: 'Topic', options: topics.map((t) => [t, t]) },
    { name: 'partitions', label: 'Partitions (optional)', placeholder: 'e.g. 0,1 — empty for all' },
    { name: 'to', label: 'Reset to', value: 'earliest',
      options: [['earliest', 'Earliest'], ['latest', 'Latest'], ['offset', 'Offset'], ['timestamp', 'Timestamp']] },
    { name: 'offset', label: 'Offset', type: 'number', min: 0, showIf: (v) => v.to === 'offset' },
    { name: 'timestamp', label: 'Timestamp (local time)', type: 'datetime-local', showIf: (v) => v.to === 'timestamp' },
  ], async (v) => {
    if (!v.topic) throw invalid('This group has no topics.');
    const parts = v.partitions.trim() ? v.partitions.split(/[\s,]+/).filter(Boolean).map((p) => intValue(p, 'Partition')) : null;
    const body = { topic: v.topic, partitions: parts, to: v.to };
    if (v.to === 'offset') body.value = intValue(v.offset, 'Offset');
    if (v.to === 'timestamp') body.value = timestampValue(v.timestamp);
    await api(`api/groups/${enc(group.group_id)}/reset-offsets`, body);
    return `Offsets of ${group.group_id} reset on ${v.topic}.`;
  });
}

// ---------- topics ----------

function healthBadges(t) {
  const out = [];
  if (t.offline > 0) out.push(badge(`${t.offline} offline`, 'danger'));
  if (t.under_replicated > 0) out.push(badge(`${t.under_replicated} under-replicated`, 'warn'));
  return out.length ? out : badge('ok', 'good');
}

function topicsView(main, view) {
  const filter = h('input', { id: 'topic-filter', type: 'search', placeholder: 'Filter topics…' });
  const internal = h('input', { id: 'show-internal', type: 'checkbox' });
  const counter = h('span', { class: 'muted' });
  const tbl = table('topics-table', ['Name', '#Partitions', '#RF', '#Size', '#Messages', 'Status']);
  let topics = [];
  const render = () => {
    const q = filter.value.trim().toLowerCase();
    const shown = topics.filter((t) => (internal.checked || !t.internal) && t.name.toLowerCase().includes(q));
    counter.textContent = `${shown.length} of ${topics.length} topics`;
    setRows(tbl, shown.map((t) => h('tr', { 'data-topic': t.name, class: t.offline ? 'row-danger' : t.under_replicated ? 'row-warn' : null },
      h('td', {}, link(topicHref(t.name), t.name), t.internal ? [' ', badge('internal')] : null),
      num(t.partitions), num(t.replication_factor), num(fmtBytes(t.size_bytes), '', t.size_bytes), num(fmtCount(t.messages), '', t.messages),
      h('td', {}, healthBadges(t)))), topics.length ? 'No topic matches the filter.' : 'No topics yet.');
  };
  filter.addEventListener('input', render);
  internal.addEventListener('change', render);
  main.append(h('div', { id: 'topics' },
    h('div', { class: 'title-row' }, h('h1', {}, 'Topics'),
      writeEnabled() ? h('button', { id: 'create-topic', class: 'primary', onclick: createTopicDialog }, 'Create topic') : null),
    h('section', { class: 'card' },
      h('div', { class: 'toolbar' }, filter, h('label', { class: 'check' }, internal, 'Show internal topics'), counter),
      scroll(tbl))));
  view.refresh = async () => {
    [{ topics }] = await view.get('api/topics');
    topics.sort((a, b) => a.name.localeCompare(b.name));
    render();
  };
}

function replicaList(ids, bad, badTitle) {
  return ids.map((id) => h('span', { class: `replica${bad.includes(id) ? ' oos' : ''}`, title: bad.includes(id) ? badTitle : null }, id));
}

function topicView(main, view, name) {
  const head = h('div', { class: 'subtitle' });
  const parts = table('topic-partitions', ['#Partition', '#Leader', 'Replicas', 'ISR', '#Log start', '#High watermark', '#Messages', '#Size', '#Segments']);
  const configs = table('topic-configs', ['Name', 'Value', 'Source']);
  const grid = h('div', { class: 'charts' });
  const bytes = makeChart(view, 'bytes', 'Bytes in / out', fmtBps, null, BYTE_INCRS);
  const msgs = makeChart(view, 'messages', 'Messages in', fmtRate('msg/s'));
  grid.append(bytes.box, msgs.box);
  const mb = messageBrowser(name);
  const actions = h('div', { class: 'actions' });
  const secs = [['Partitions', scroll(parts)], ['Charts', grid], ['Messages', mb.el], ['Configs', scroll(configs)]]
    .map(([title, body]) => section(title, body));
  // In-page jumps are buttons, not #anchors, because the hash holds the route.
  const jump = h('nav', { class: 'tabs' }, secs.map((s, i) =>
    h('button', { type: 'button', onclick: () => s.scrollIntoView({ behavior: 'smooth' }) }, ['Partitions', 'Charts', 'Messages', 'Configs'][i])));
  main.append(h('div', { id: 'topic', 'data-topic': name },
    h('div', { class: 'crumbs' }, link('#/topics', 'Topics'), ' / '),
    h('div', { class: 'title-row' }, h('h1', {}, name), actions), head, jump, secs));
  let topic = null;
  view.missing = ['#/topics', 'All topics'];
  if (writeEnabled()) {
    actions.append(h('button', { id: 'delete-records', class: 'danger', onclick: () => topic && deleteRecordsDialog(topic) }, 'Delete records'));
  }

  view.refresh = async () => {
    const [t, hist] = await view.get(`api/topics/${enc(name)}`, `?api/history/topics/${enc(name)}`);
    topic = t;
    const total = (k) => t.partitions.reduce((n, p) => (n == null || p[k] == null ? null : n + p[k]), 0);
    const messages = t.partitions.reduce((n, p) => n + p.high_watermark - p.log_start_offset, 0);
    const rf = t.partitions.length ? t.partitions[0].replicas.length : 0;
    fill(head, 
      t.internal ? badge('internal') : null,
      h('span', {}, `${t.partitions.length} partitions`), h('span', {}, `RF ${rf}`),
      h('span', {}, fmtBytes(total('size_bytes'))), h('span', {}, `${fmtCount(messages)} messages`),
      h('span', { class: 'mono muted', title: 'Topic id' }, t.topic_id),
      healthBadges({ offline: t.partitions.filter((p) => p.offline).length,
        under_replicated: t.partitions.filter((p) => p.under_replicated).length }));
    setRows(parts, t.partitions.map((p) => h('tr', { 'data-partition': p.partition, class: p.offline ? 'row-danger' : p.under_replicated ? 'row-warn' : null },
      num(p.partition), p.leader < 0 ? h('td', { class: 'num' }, badge('offline', 'danger')) : num(p.leader),
      h('td', { class: 'mono' }, replicaList(p.replicas, p.offline_replicas, 'offline replica')),
      h('td', { class: 'mono' }, replicaList(p.isr, []),
        replicaList(p.replicas.filter((r) => !p.isr.includes(r)), p.replicas, 'out of sync')),
      num(p.log_start_offset), num(p.high_watermark), num(fmtCount(p.high_watermark - p.log_start_offset), '', p.high_watermark - p.log_start_offset),
      num(fmtBytes(p.size_bytes), '', p.size_bytes), num(p.segments))));
    // Non-default configs first: they are the ones people look for.
    const isDefault = (c) => c.source === 'DEFAULT_CONFIG';
    const sorted = [...t.configs].sort((a, b) => isDefault(a) - isDefault(b) || a.name.localeCompare(b.name));
    setRows(configs, sorted.map((c) => {
      const nonDefault = !isDefault(c);
      return h('tr', { 'data-config': c.name, class: nonDefault ? 'nondefault' : null },
        h('td', { class: 'mono' }, c.name, c.read_only ? [' ', badge('read-only')] : null),
        h('td', { class: 'mono value' }, c.sensitive ? '******' : c.value ?? '–'),
        h('td', {}, badge(c.source.replace(/_CONFIG$/, '').replace(/_/g, ' ').toLowerCase(), nonDefault ? 'accent' : '')));
    }), 'No configs.');
    mb.setPartitions(t.partitions.map((p) => p.partition));
    bytes.update(hist.t, [{ label: 'In', data: hist.bytes_in }, { label: 'Out', data: hist.bytes_out }]);
    msgs.update(hist.t, [{ label: 'Messages in', data: hist.messages_in }]);
  };
}

// ---------- message browser ----------

const utf8 = new TextDecoder('utf-8', { fatal: true });
const utf8Lossy = new TextDecoder('utf-8');
const TRUNCATE = 300;
// C0 control characters (but tab, newline, CR) and DEL render as blank boxes: show them as '·'.
const CONTROL = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/;
const printable = (text) => text.replace(new RegExp(CONTROL.source, 'g'), '\u00b7');

function fromBase64(s) {
  const bin = atob(s);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

// Re-indents JSON text token by token, keeping number literals as they are
// (JSON.parse + stringify would round integers above 2^53, e.g. 64-bit ids).
function prettyJson(text) {
  JSON.parse(text); // throws when it is not JSON
  let out = '';
  let depth = 0;
  const nl = () => `\n${'  '.repeat(depth)}`;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '"') { // copy a whole string, escapes included
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j;
    } else if (ch === '{' || ch === '[') {
      const close = ch === '{' ? '}' : ']';
      const rest = text.slice(i + 1).trimStart();
      if (rest[0] === close) { // keep {} and [] on one line
        out += ch + close;
        i = text.length - rest.length;
      } else {
        depth++;
        out += ch + nl();
      }
    } else if (ch === '}' || ch === ']') {
      depth--;
      out += nl() + ch;
    } else if (ch === ',') out += `,${nl()}`;
    else if (ch === ':') out += ': ';
    else if (!/\s/.test(ch)) out += ch;
  }
  return out;
}

// Decodes a base64 payload for display: {text, binary (not valid UTF-8), none (null)}.
function decode(b64, format) {
  if (b64 == null) return { text: 'null', none: true };
  const bytes = fromBase64(b64);
  if (format === 'hex') {
    return { text: Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ') };
  }
  let text;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { text: printable(utf8Lossy.decode(bytes)), binary: true }; // U+FFFD where not UTF-8
  }
  if (CONTROL.test(text)) return { text: printable(text), binary: true };
  if (format === 'json') {
    try { text = prettyJson(text); } catch { /* not JSON: as text */ }
  }
  return { text };
}

function payload(b64, format, toHex) {
  const d = decode(b64, format);
  if (d.none) return h('span', { class: 'null' }, 'null');
  const pre = h('pre', {}, d.text.length > TRUNCATE ? d.text.slice(0, TRUNCATE) + '…' : d.text);
  const out = [pre];
  if (d.text.length > TRUNCATE) {
    const more = h('button', { type: 'button', class: 'link', onclick: () => {
      const open = pre.classList.toggle('expanded');
      pre.textContent = open ? d.text : d.text.slice(0, TRUNCATE) + '…';
      more.textContent = open ? 'collapse' : `show all (${d.text.length} chars)`;
    } }, `show all (${d.text.length} chars)`);
    out.push(more);
  }
  if (d.binary) {
    out.push(h('button', { type: 'button', class: 'link warn', title: 'Not valid UTF-8 text: invalid bytes show as \ufffd, control characters as \u00b7', onclick: toHex }, 'binary: view as hex'));
  }
  return out;
}

function messageBrowser(topicName) {
  const sel = (id, options) => h('select', { id }, options.map(([v, t]) => h('option', { value: v }, t)));
  const mode = sel('mb-mode', [['newest', 'Newest'], ['offset', 'From offset'], ['timestamp', 'From timestamp']]);
  const partition = sel('mb-partition', [['', 'All']]);
  const offset = h('input', { id: 'mb-offset', type: 'number', min: 0, value: 0 });
  const timestamp = h('input', { id: 'mb-timestamp', type: 'datetime-local', step: 1 });
  const limit = h('input', { id: 'mb-limit', type: 'number', min: 1, max: 500, value: 50 });
  const format = sel('mb-format', [['text', 'Text'], ['json', 'JSON'], ['hex', 'Hex']]);
  const field = (label, input) => h('label', { class: 'field' }, h('span', {}, label), input);
  const offsetField = field('Offset', offset);
  const tsField = field('From (local time)', timestamp);
  const status = h('div', { class: 'mb-status muted' }, 'Choose where to start and press Load. The list does not refresh by itself.');
  const records = table('mb-records', ['#Partition', '#Offset', 'Timestamp', 'Key', 'Value', 'Headers']);
  setRows(records, [], 'No records loaded.');
  const form = h('form', { id: 'mb-form', class: 'mb-form' },
    field('Mode', mode), field('Partition', partition), offsetField, tsField, field('Limit', limit),
    field('Format', format), h('button', { id: 'mb-load', type: 'submit', class: 'primary' }, 'Load'));
  let loaded = [];
  let partitionCount = -1;

  const syncMode = () => {
    offsetField.hidden = mode.value !== 'offset';
    tsField.hidden = mode.value !== 'timestamp';
  };
  const toHex = () => { format.value = 'hex'; render(); };
  function render() {
    const f = format.value;
    setRows(records, loaded.map((r) => h('tr', { 'data-partition': r.partition, 'data-offset': r.offset },
      num(r.partition), num(r.offset),
      h('td', { class: 'mono nowrap', title: `${r.timestamp_type} ${r.timestamp}` }, isoLocal(r.timestamp)),
      h('td', { class: 'payload key' }, payload(r.key, f, toHex)),
      h('td', { class: 'payload' }, payload(r.value, f, toHex)),
      h('td', { class: 'payload headers' }, r.headers.map((hd) => h('div', {},
        h('span', { class: 'hkey' }, `${hd.key}:\u00a0`), payload(hd.value, f === 'json' ? 'text' : f, toHex)))))), 'No records match.');
  }
  async function load(ev) {
    ev.preventDefault();
    const q = new URLSearchParams({ mode: mode.value, limit: limit.value || '50' });
    if (partition.value !== '') q.set('partition', partition.value);
    const button = $('#mb-load', form);
    button.disabled = true;
    status.textContent = 'Loading…';
    status.className = 'mb-status muted';
    try {
      if (mode.value === 'offset') q.set('offset', String(intValue(offset.value, 'Offset')));
      if (mode.value === 'timestamp') q.set('timestamp', String(timestampValue(timestamp.value)));
      const res = await api(`api/topics/${enc(topicName)}/messages?${q}`);
      loaded = res.records;
      const ranges = res.partitions.map((p) => `${p.partition}: ${p.log_start_offset}–${p.high_watermark}`).join(', ');
      status.textContent = `${loaded.length} record${loaded.length === 1 ? '' : 's'} loaded at ${new Date().toLocaleTimeString()}. Offsets (start–high watermark) ${ranges || 'none'}.`;
      render();
    } catch (e) {
      status.replaceChildren(h('b', {}, e.code), ' ', e.message);
      status.className = 'mb-status form-error';
    } finally {
      button.disabled = false;
    }
  }
  mode.addEventListener('change', syncMode);
  format.addEventListener('change', render); // re-decode the loaded records; no refetch
  form.addEventListener('submit', load);
  syncMode();
  return {
    el: h('div', { id: 'message-browser' }, form, status, scroll(records)),
    setPartitions(ids) { // only when the count changes, so the user's choice survives polling
      if (ids.length === partitionCount) return;
      partitionCount = ids.length;
      const keep = partition.value;
      fill(partition, h('option', { value: '' }, 'All'), ids.map((p) => h('option', { value: p }, p)));
      if ([...partition.options].some((o) => o.value === keep)) partition.value = keep;
    },
  };
}

// ---------- consumer groups ----------

const stateBadge = (s) => badge(s, { Stable: 'good', Empty: '', Dead: 'danger' }[s] ?? 'warn');
// Lag as plain digits (no grouping) so the cell text is the number itself.
const lagCell = (lag) => h('td', { class: `num lag${lag > 0 ? ' hot' : ''}`, 'data-value': lag ?? '' }, lag ?? '–');

function groupsView(main, view) {
  const tbl = table('groups-table', ['Group', 'State', '#Members', '#Coordinator', '#Lag', 'Topics']);
  main.append(h('div', { id: 'groups' }, h('h1', {}, 'Consumer groups'), section('Groups', scroll(tbl))));
  view.refresh = async () => {
    const [{ groups }] = await view.get('api/groups');
    groups.sort((a, b) => a.group_id.localeCompare(b.group_id));
    setRows(tbl, groups.map((g) => h('tr', { 'data-group': g.group_id },
      h('td', {}, link(groupHref(g.group_id), g.group_id)), h('td', {}, stateBadge(g.state)),
      num(g.members), num(g.coordinator), lagCell(g.lag),
      h('td', { class: 'topics' }, g.topics.map((t) => link(topicHref(t), t))))), 'No consumer groups.');
  };
}

function groupView(main, view, id) {
  const head = h('div', { class: 'subtitle' });
  const lagTotal = h('span', { id: 'group-lag', class: 'big' }, '–');
  const members = table('group-members', ['Member', 'Client id', 'Instance id', 'Host', 'Assignment']);
  const offsets = table('group-offsets', ['Topic', '#Partition', '#Committed', '#High watermark', '#Lag', 'Member']);
  const chart = makeChart(view, 'lag', 'Total lag', (v) => (v == null ? '–' : fmtShort(Math.round(v))));
  const chartNote = h('p', { class: 'muted', hidden: true }, 'Lag history is sampled by the group coordinator; open the console of that broker to see it.');
  const actions = h('div', { class: 'actions' });
  main.append(h('div', { id: 'group', 'data-group': id },
    h('div', { class: 'crumbs' }, link('#/groups', 'Consumer groups'), ' / '),
    h('div', { class: 'title-row' }, h('h1', {}, id), actions), head,
    h('div', { class: 'split' },
      h('section', { class: 'card lag-card' }, h('h2', {}, 'Total lag'), lagTotal),
      h('section', { class: 'card grow' }, h('h2', {}, 'Lag over time'), h('div', { class: 'charts one' }, chart.box), chartNote)),
    section('Members', scroll(members)), section('Offsets', scroll(offsets))));
  let group = null;
  view.missing = ['#/groups', 'All consumer groups'];
  if (writeEnabled()) {
    actions.append(h('button', { id: 'reset-offsets', class: 'danger', onclick: () => group && resetOffsetsDialog(group) }, 'Reset offsets'));
  }

  view.refresh = async () => {
    const [g, hist] = await view.get(`api/groups/${enc(id)}`, `?api/history/groups/${enc(id)}`);
    group = g;
    fill(head, stateBadge(g.state), h('span', {}, `${g.protocol_type || 'no protocol type'}${g.protocol ? ` / ${g.protocol}` : ''}`),
      h('span', {}, `coordinator ${g.coordinator}`), h('span', {}, `${g.members.length} members`),
      writeEnabled() && g.state !== 'Empty' ? h('span', { class: 'muted' }, 'Offsets can be reset only while the group is Empty.') : null);
    lagTotal.textContent = g.lag ?? '–';
    lagTotal.className = `big${g.lag > 0 ? ' hot' : g.lag == null ? ' unknown' : ''}`;
    lagTotal.dataset.value = g.lag ?? '';
    setRows(members, g.members.map((m) => h('tr', { 'data-member': m.member_id },
      h('td', { class: 'mono' }, m.member_id), h('td', {}, m.client_id), h('td', {}, m.group_instance_id ?? '–'),
      h('td', { class: 'mono' }, m.host),
      h('td', {}, m.assignment.map((a) => h('div', {}, link(topicHref(a.topic), a.topic), ': ',
        h('span', { class: 'mono' }, a.partitions.join(', '))))))), 'No active members.');
    const rows = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
    setRows(offsets, rows.map((o) => h('tr', { 'data-topic': o.topic, 'data-partition': o.partition },
      h('td', {}, link(topicHref(o.topic), o.topic)), num(o.partition), num(o.committed), num(o.high_watermark),
      lagCell(o.lag), h('td', { class: 'mono small' }, o.member_id ?? '–'))), 'No committed offsets.');
    chart.update(hist.t, [{ label: 'Lag', data: hist.lag }]);
    chartNote.hidden = hist.t.length > 0;
  };
}

// ---------- start ----------

window.addEventListener('hashchange', route);
document.addEventListener('visibilitychange', () => {
  $('#status').textContent = document.hidden ? 'paused' : $('#status').textContent;
  if (!document.hidden) tick();
});
let resizeTimer = 0;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => state.view && state.view.charts.forEach((c) => c.resize()), 150);
});
setInterval(() => tick(), POLL_MS);

// Load the cluster first so views know whether write controls belong on the page.
(async () => {
  try { setCluster(await api('api/cluster')); } catch { /* the view's own poll reports it */ }
  route();
})();
