// redlimit serve's dashboard. Every view reads the REST API of the
// instance serving the page; writes carry the admin token typed into the
// page, kept in sessionStorage only and sent as an Authorization header
// (no cookie: a page of another site cannot write).
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './style.css';

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = 'redlimit.token';
const KEEP = 120; // seconds of traffic kept for the chart

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

function notice(text, error = false) {
  const n = $('notice');
  n.textContent = text;
  n.classList.toggle('error', error);
}

// --- token --------------------------------------------------------------

const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

function showMode() {
  const rw = token() !== '';
  $('mode').textContent = rw ? 'Writes enabled' : 'Read-only';
  $('mode').classList.toggle('rw', rw);
  for (const b of document.querySelectorAll('button[data-write]')) b.disabled = !rw;
}

$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const v = $('token').value.trim();
  if (v) sessionStorage.setItem(TOKEN_KEY, v);
  $('token').value = '';
  showMode();
});
$('token-forget').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  $('token').value = '';
  showMode();
});

// --- API ----------------------------------------------------------------

async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET' && token()) headers.Authorization = 'Bearer ' + token();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store', credentials: 'omit' });
  let data = null;
  try { data = await resp.json(); } catch { /* not JSON */ }
  return { ok: resp.ok, status: resp.status, data };
}

const problemText = (r) => (r.data && (r.data.detail || r.data.title)) || 'HTTP ' + r.status;

// --- policies -------------------------------------------------------------

// escapeSeg escapes a domain as rules.Escape does for a policy's name.
const escapeSeg = (s) => s.replace(/[%/=]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0'));
const policyName = (r) => escapeSeg(r.domain) + '/' + r.path;

let rules = [];
let rulesVersion = '';
let editable = false; // the server has the /v1/rules API

function normalize(data, v1) {
  return (data.rules || []).map((r) => ({
    domain: r.domain,
    path: r.path,
    name: r.name || '',
    limits: (r.limits || []).map((l) => ({ ...l, text: l.limit || '' })),
    unlimited: !!r.unlimited,
    blocked: !!r.blocked,
    shadow: !!r.shadow_mode,
    source: v1 ? r.source || 'file' : (r.source || '').startsWith('api') ? 'api' : 'file',
    where: v1 ? (r.file ? r.file + ':' + r.line : r.set_by ? 'set by ' + r.set_by : '') : (r.source || '').replace(/^file /, ''),
  }));
}

async function loadRules() {
  let r = await api('/v1/rules');
  editable = r.ok;
  if (r.status === 404) r = await api('/rules');
  if (!r.ok) {
    notice('Rules: ' + problemText(r), true);
    return;
  }
  rules = normalize(r.data, editable);
  rulesVersion = r.data.version || r.data.digest || '';
  $('rules-version').textContent = rulesVersion ? 'version ' + rulesVersion.slice(0, 12) : '';
  renderRules();
  refreshPolicySelects();
}

function limitsText(r) {
  if (r.unlimited) return 'unlimited';
  if (r.blocked) return 'blocked';
  return r.limits.map((l) => (l.name ? l.name + ': ' : '') + (l.text || `${l.rate} per ${l.interval} (${l.algorithm})`)).join('; ') || '—';
}

function renderRules() {
  const body = $('rules-body');
  body.replaceChildren();
  if (!rules.length) body.append(el('tr', {}, el('td', { colspan: 5 }, 'No rules.')));
  rules.forEach((r, i) => {
    const label = policyName(r) + (r.name ? ' (' + r.name + ')' : '');
    const edit = editable && !r.blocked && r.limits.length && r.limits.every((l) => ALGORITHMS.includes(l.algorithm))
      ? el('button', { type: 'button', class: 'secondary', 'data-write': true, 'aria-label': 'Edit the limits of ' + label, onclick: () => openEdit(i) }, 'Edit')
      : '';
    const revert = editable && r.source === 'api'
      ? el('button', { type: 'button', class: 'secondary', 'data-write': true, 'aria-label': 'Remove the API rule of ' + label, onclick: () => revertRule(r) }, 'Revert')
      : '';
    body.append(el('tr', { 'data-policy': policyName(r) },
      el('th', { scope: 'row' }, el('code', {}, label)),
      el('td', {}, limitsText(r)),
      el('td', {}, el('span', { class: 'tag ' + r.source }, r.source), ' ', r.where),
      el('td', {}, r.shadow ? 'yes' : 'no'),
      el('td', {}, edit, ' ', revert)));
  });
  showMode();
}

const ALGORITHMS = ['fixed-window', 'sliding-log', 'sliding-counter', 'token-bucket', 'leaky-bucket'];
const DURATION = /^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$/;
let editing = null;

function openEdit(i) {
  editing = rules[i];
  $('edit-policy').textContent = policyName(editing);
  $('edit-error').textContent = '';
  $('edit-shadow').checked = editing.shadow;
  const box = $('edit-limits');
  box.replaceChildren();
  editing.limits.forEach((l, j) => {
    const id = (f) => `edit-${j}-${f}`;
    const sel = el('select', { id: id('algorithm') }, ALGORITHMS.map((a) => el('option', { value: a, selected: a === l.algorithm }, a)));
    box.append(el('fieldset', {},
      el('legend', {}, l.name ? 'Limit ' + l.name : 'Limit ' + (j + 1)),
      el('label', { for: id('algorithm') }, 'Algorithm'), sel,
      el('label', { for: id('rate') }, 'Requests'), el('input', { id: id('rate'), type: 'number', min: 0, step: 1, required: true, value: l.rate }),
      el('label', { for: id('interval') }, 'Per interval'), el('input', { id: id('interval'), required: true, value: l.interval, 'aria-describedby': 'interval-help' }),
      el('label', { for: id('burst') }, 'Burst (token bucket)'), el('input', { id: id('burst'), type: 'number', min: 0, step: 1, value: l.burst || '' }),
      el('label', { for: id('capacity') }, 'Capacity (leaky bucket)'), el('input', { id: id('capacity'), type: 'number', min: 0, step: 1, value: l.capacity || '' })));
  });
  box.append(el('p', { id: 'interval-help', class: 'help' }, 'Intervals are Go durations: 1s, 1m, 1h30m.'));
  $('edit').showModal();
}

function readEdit() {
  const limits = [];
  for (let j = 0; j < editing.limits.length; j++) {
    const v = (f) => $(`edit-${j}-${f}`).value.trim();
    const rate = Number(v('rate'));
    if (v('rate') === '' || !Number.isInteger(rate) || rate < 0) throw new Error(`Limit ${j + 1}: requests must be a whole number, 0 or more.`);
    if (!DURATION.test(v('interval'))) throw new Error(`Limit ${j + 1}: the interval "${v('interval')}" is not a duration such as 1s, 1m or 1h.`);
    const l = { algorithm: v('algorithm'), rate, interval: v('interval') };
    if (editing.limits[j].name) l.name = editing.limits[j].name;
    for (const f of ['burst', 'capacity']) {
      if (v(f) === '') continue;
      const n = Number(v(f));
      if (!Number.isInteger(n) || n < 0) throw new Error(`Limit ${j + 1}: ${f} must be a whole number, 0 or more.`);
      l[f] = n;
    }
    limits.push(l);
  }
  return { limits, shadow_mode: $('edit-shadow').checked, unlimited: false };
}

$('edit-cancel').addEventListener('click', () => $('edit').close());
$('edit-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  let body;
  try {
    body = readEdit();
  } catch (e) {
    $('edit-error').textContent = e.message;
    return;
  }
  const what = body.limits.map((l) => `${l.rate} per ${l.interval} (${l.algorithm})`).join(', ');
  if (!window.confirm(`Set ${policyName(editing)} to ${what} on every instance?`)) return;
  const r = await api(rulePath(editing), { method: 'PUT', body });
  if (!r.ok) {
    $('edit-error').textContent = r.status === 401 || r.status === 403 ? 'Refused: ' + problemText(r) + ' (check the admin token).' : problemText(r);
    return;
  }
  $('edit').close();
  notice(`Saved ${policyName(editing)}: rules version ${(r.data.version || '').slice(0, 12)}; the instances below pick it up.`);
  await loadRules();
  await loadInstances();
});

const rulePath = (r) => '/v1/rules/' + encodeURIComponent(r.domain) + '/' + r.path.split('/').map(encodeURIComponent).join('/');

// revertRule removes the rule set through the API: the file's, if any,
// is in force again.
async function revertRule(r) {
  if (!window.confirm(`Remove the API rule of ${policyName(r)} on every instance? The file's rule, if any, applies again.`)) return;
  const resp = await api(rulePath(r), { method: 'DELETE' });
  if (!resp.ok) {
    notice('Revert refused: ' + problemText(resp), true);
    return;
  }
  notice(`Reverted ${policyName(r)}: rules version ${(resp.data && resp.data.version || '').slice(0, 12)}.`);
  await loadRules();
  await loadInstances();
}

// --- instances ------------------------------------------------------------

function ago(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return Math.round(s / 3600) + ' h';
}

async function loadInstances() {
  const body = $('instances-body');
  const r = await api('/v1/instances');
  if (!r.ok) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 6 }, r.status === 404 ? 'This server has no instance registry.' : problemText(r))));
    return;
  }
  const now = Date.now();
  body.replaceChildren(...(r.data.instances || []).map((i) => {
    const current = !rulesVersion || i.rules_version === rulesVersion;
    return el('tr', { 'data-instance': i.id },
      el('th', { scope: 'row' }, el('code', {}, i.id)),
      el('td', {}, [i.http_addr, i.grpc_addr].filter(Boolean).join(' · ')),
      el('td', {}, i.version || ''),
      el('td', { 'data-rules-version': i.rules_version || '' }, el('code', {}, (i.rules_version || '').slice(0, 12)), current ? '' : ' (updating)'),
      el('td', {}, i.started_at ? ago(now - Date.parse(i.started_at)) : ''),
      el('td', {}, i.last_heartbeat ? ago(now - Date.parse(i.last_heartbeat)) + ' ago' : ''));
  }));
}

// --- traffic --------------------------------------------------------------

const seconds = new Map(); // unix second -> Map(policy -> [granted, refused])
const knownPolicies = new Set();

function merge(series) {
  for (const p of series.policies || []) {
    knownPolicies.add(p.policy);
    for (let i = 0; i < series.seconds; i++) {
      const t = series.from + i;
      if (!seconds.has(t)) seconds.set(t, new Map());
      seconds.get(t).set(p.policy, [p.granted[i], p.refused[i]]);
    }
  }
  const last = series.from + series.seconds - 1;
  for (const t of seconds.keys()) if (t <= last - KEEP) seconds.delete(t);
}

let chart = null;
function chartData() {
  const want = $('traffic-policy').value;
  const now = Math.floor(Date.now() / 1000);
  const xs = [], gs = [], rs = [];
  for (let t = now - KEEP + 1; t <= now; t++) {
    let g = 0, r = 0;
    for (const [p, c] of seconds.get(t) || []) {
      if (want && p !== want) continue;
      g += c[0];
      r += c[1];
    }
    xs.push(t); gs.push(g); rs.push(r);
  }
  return [xs, gs, rs];
}

function drawTraffic() {
  const box = $('chart');
  const width = Math.max(280, box.clientWidth);
  if (!chart) {
    chart = new uPlot({
      width, height: 240,
      series: [{}, { label: 'granted', stroke: '#1a7f37', width: 2 }, { label: 'refused', stroke: '#b3261e', width: 2, dash: [6, 4] }],
      axes: [{}, { label: 'requests/s' }],
      scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    }, chartData(), box);
    new ResizeObserver(() => chart.setSize({ width: Math.max(280, box.clientWidth), height: 240 })).observe(box);
  } else {
    chart.setData(chartData());
  }
  // The table: the last 60 seconds by policy, also the chart's text.
  const now = Math.floor(Date.now() / 1000);
  const sums = new Map();
  for (const [t, ps] of seconds) {
    if (t <= now - 60) continue;
    for (const [p, c] of ps) {
      const s = sums.get(p) || [0, 0];
      s[0] += c[0]; s[1] += c[1];
      sums.set(p, s);
    }
  }
  const rows = [...sums.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  $('traffic-body').replaceChildren(...(rows.length ? rows.map(([p, s]) => el('tr', { 'data-policy': p },
    el('th', { scope: 'row' }, el('code', {}, p)), el('td', { class: 'num granted' }, s[0]), el('td', { class: 'num refused' }, s[1])))
    : [el('tr', {}, el('td', { colspan: 3 }, 'No traffic in the last minute.'))]));
}

function refreshPolicySelects() {
  const names = [...new Set([...rules.map(policyName), ...knownPolicies])].sort();
  for (const [id, blank] of [['traffic-policy', 'All policies'], ['hot-policy', null]]) {
    const sel = $(id);
    const cur = sel.value;
    const opts = names.map((n) => el('option', { value: n, selected: n === cur }, n));
    sel.replaceChildren(...(blank ? [el('option', { value: '' }, blank)] : []), ...opts);
    if (cur && names.includes(cur)) sel.value = cur;
  }
}

async function startTraffic() {
  const r = await api('/v1/traffic?seconds=' + KEEP);
  if (r.ok) merge(r.data);
  else if (r.status === 404) {
    $('stream-state').textContent = 'Traffic counting is off on this server.';
    return;
  }
  drawTraffic();
  const es = new EventSource('/v1/traffic/stream');
  es.onopen = () => { $('stream-state').textContent = 'Live'; };
  es.onmessage = (m) => {
    const before = knownPolicies.size;
    merge(JSON.parse(m.data));
    if (knownPolicies.size !== before) refreshPolicySelects();
    drawTraffic();
  };
  es.onerror = () => { $('stream-state').textContent = 'Reconnecting…'; };
}
$('traffic-policy').addEventListener('change', drawTraffic);

// --- hottest keys ---------------------------------------------------------

async function loadHot() {
  const p = $('hot-policy').value;
  const body = $('hot-body');
  if (!p) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 2 }, 'No policy yet.')));
    return;
  }
  const r = await api('/v1/traffic/top?n=10&policy=' + encodeURIComponent(p));
  if (!r.ok) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 2 }, problemText(r))));
    return;
  }
  const keys = r.data.keys || [];
  body.replaceChildren(...(keys.length ? keys.map((k) => el('tr', {}, el('td', {}, el('code', {}, k.key)), el('td', { class: 'num' }, k.hits)))
    : [el('tr', {}, el('td', { colspan: 2 }, 'No requests in the last minutes.'))]));
}
$('hot-policy').addEventListener('change', loadHot);

// --- inspect a key --------------------------------------------------------

$('inspect-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const out = $('inspect-out');
  const domain = $('inspect-domain').value.trim();
  const desc = $('inspect-descriptor').value.trim();
  if (!domain || !/^[^=,]+=[^,]*(,[^=,]+=[^,]*)*$/.test(desc)) {
    out.replaceChildren(el('p', { class: 'error', role: 'alert' }, 'Give a domain and a descriptor as key=value,key2=value2.'));
    return;
  }
  // Each key and value escaped apart: ',' and '=' between them are the syntax.
  const query = desc.split(',').map((kv) => {
    const i = kv.indexOf('=');
    return encodeURIComponent(kv.slice(0, i)) + '=' + encodeURIComponent(kv.slice(i + 1));
  }).join(',');
  const r = await api('/v1/keys/' + encodeURIComponent(domain) + '?descriptor=' + query);
  if (!r.ok) {
    out.replaceChildren(el('p', { class: 'error', role: 'alert' }, r.status === 404 && !r.data ? 'This server cannot inspect keys yet.' : problemText(r)));
    return;
  }
  const limits = r.data.limits || [];
  out.replaceChildren(
    el('p', {}, r.data.summary || ''),
    el('table', { class: 'grid' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Limit'), el('th', { scope: 'col', class: 'num' }, 'Remaining'), el('th', { scope: 'col', class: 'num' }, 'Resets in'), el('th', { scope: 'col' }, 'State'))),
      el('tbody', {}, limits.map((l) => el('tr', {},
        el('td', {}, (l.name || 'limit') + (l.limit !== undefined ? ' (' + l.limit + ')' : '')), el('td', { class: 'num' }, l.remaining ?? ''),
        el('td', { class: 'num' }, l.reset_ms !== undefined ? ago(l.reset_ms) : ''),
        el('td', {}, l.remaining > 0 ? 'open' : 'exhausted'))))));
});

// --- Redisson -------------------------------------------------------------

async function loadRedisson() {
  const body = $('redisson-body');
  const r = await api('/v1/redisson');
  if (!r.ok) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 4 }, problemText(r))));
    return;
  }
  const ls = r.data.limiters || [];
  body.replaceChildren(...(ls.length ? ls.map((l) => el('tr', {},
    el('th', { scope: 'row' }, el('code', {}, l.name)),
    el('td', {}, l.limit || l.error || 'not initialized'),
    el('td', {}, l.mode || ''),
    el('td', {}, (l.states || []).map((s) => (s.client ? s.client + ': ' : '') + `${s.left} left, ${s.in_use} in use`).join('; '))))
    : [el('tr', {}, el('td', { colspan: 4 }, 'No Redisson limiter on this Redis.'))]));
  if (r.data.truncated) body.append(el('tr', {}, el('td', { colspan: 4 }, 'More limiters exist than are listed.')));
}
$('redisson-load').addEventListener('click', loadRedisson);

// --- start ----------------------------------------------------------------

async function every(ms, fn) {
  for (;;) {
    try { await fn(); } catch (e) { notice(String(e), true); }
    await new Promise((r) => setTimeout(r, ms));
  }
}

showMode();
await loadRules();
startTraffic();
every(2000, loadInstances);
every(5000, loadRules);
every(5000, loadHot);
loadRedisson();
