// Flue dashboard: servers with presence, deployments with state, detail and live output,
// the event feed, and a stacks view (status, outputs, units, operation history). It reads
// GET /v1/servers and GET /v1/deployments once, then follows the gateway's Server-Sent
// Events (GET /v1/events) to stay current without a reload. Deployments and the feed are
// filtered (server, stack, status, event type; progress events hidden unless asked for)
// and paged; every time is shown with its time zone.
//
// Every text that comes from the gateway goes into the page as a text node (textContent,
// append of a string): nothing here parses HTML.
//
// The API needs a bearer token: the page asks for one (a form), keeps it in sessionStorage
// (this tab, until it closes) and sends it on every fetch. EventSource cannot send headers,
// so each stream connection first trades the token for a 60 s ticket
// (POST /v1/events/tickets) and opens /v1/events?ticket=…; the token itself never goes
// into a URL.
'use strict';

(() => {
  /** Deployments kept on the page (the oldest finished ones go first). */
  const MAX_DEPLOYMENTS = 200;
  /** Events kept in the feed. */
  const MAX_FEED = 200;
  /** Output lines kept per deployment. */
  const MAX_OUTPUT_LINES = 2000;
  /** How far back the first connection replays events, to fill the feed and live output. */
  const REPLAY_MINUTES = 15;
  /** Deployments seen in events but never read, read together after this pause. */
  const READ_DELAY_MS = 200;
  /** From this many unread deployments on, one listing read replaces reading each. */
  const BATCH_READ_MIN = 8;
  /** Largest `limit` of the paginated listings. */
  const MAX_LIST_LIMIT = 1000;
  /** Response header carrying the cursor of a listing's next page. */
  const NEXT_CURSOR_HEADER = 'flue-next-cursor';
  /** Output panels opened by themselves (live output) at once; the oldest closes first. */
  const MAX_AUTO_OPEN = 3;
  /** Reconnect delay once the browser gave up on a stream (a non-200 answer). */
  const RETRY_MS = 5000;
  /** Order of states: an older event never moves a deployment back. */
  const RANK = { QUEUED: 0, IN_PROGRESS: 1, COMPLETE: 2, FAILED: 2 };
  const TYPE_PREFIX = 'io.flue.';
  /** sessionStorage key of the API token. */
  const TOKEN_KEY = 'flue-token';
  /** Deployments per page of the table. */
  const PAGE_SIZE = 25;
  /** Stacks per page (one API page each). */
  const STACK_PAGE_SIZE = 20;
  /** Operations shown per stack (the newest). */
  const STACK_OPERATIONS = 20;
  /** The value the API shows in place of a hidden one. */
  const HIDDEN = '<hidden>';
  /** The action of a convergence check: its FAILED means drift found. */
  const CHECK = 'CHECK';

  const servers = new Map(); // server id → entry
  const deployments = new Map(); // deployment id → entry
  const seenEvents = new Map(); // CloudEvent id → true, bounded, for replays after reconnects
  let lastSeq = null; // stream sequence of the last event received
  let source = null;

  const $ = (id) => document.getElementById(id);

  // ---------- small DOM helpers ----------

  /** An element with attributes (`class`, `text` and plain ones) and children (nodes or strings). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (name === 'class') node.className = value;
      else if (name === 'text') node.textContent = value;
      else node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child !== undefined && child !== null) node.append(child);
    }
    // An id may be cut by its column (it never wraps): the whole of it on hover.
    if (node.classList.contains('id') && attrs && attrs.text && !node.title) node.title = attrs.text;
    return node;
  }

  function parseTime(iso) {
    const ms = iso ? Date.parse(iso) : NaN;
    return Number.isNaN(ms) ? null : ms;
  }

  const pad = (n) => String(n).padStart(2, '0');

  /** The browser's zone's short name at `d` (`UTC`, `CET`, `GMT+1`). */
  function zoneName(d) {
    try {
      const part = new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' })
        .formatToParts(d).find((p) => p.type === 'timeZoneName');
      if (part) return part.value;
    } catch (_) {
      // No Intl: the offset says it.
    }
    return offset(d);
  }

  /** `UTC+01:00`. */
  function offset(d) {
    const m = -d.getTimezoneOffset();
    const a = Math.abs(m);
    return `UTC${m < 0 ? '-' : '+'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
  }

  /** `14:03:27 UTC` today, `2024-05-01 14:03 UTC` on another day: always with its zone. */
  function when(iso) {
    const ms = parseTime(iso);
    if (ms === null) return '–';
    const d = new Date(ms);
    const hms = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    if (d.toDateString() === new Date().toDateString()) return `${hms} ${zoneName(d)}`;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hms.slice(0, 5)} ${zoneName(d)}`;
  }

  /** `1.2 s`, `3 min 4 s` between two times, or '–'. */
  function duration(fromIso, toIso) {
    const a = parseTime(fromIso);
    const b = parseTime(toIso);
    if (a === null || b === null || b < a) return '–';
    const ms = b - a;
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
    const total = Math.round(ms / 1000);
    return `${Math.floor(total / 60)} min ${total % 60} s`;
  }

  function setTime(node, iso) {
    node.textContent = when(iso);
    if (iso) node.title = iso;
  }

  // ---------- gateway reads ----------

  /** Headers of every API call: JSON, and the session's token when there is one. */
  function apiHeaders() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { accept: 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
    return headers;
  }

  async function getJson(path) {
    return (await getPage(path)).body;
  }

  /**
   * Every item of a paginated listing: follows the `flue-next-cursor` header page by
   * page (the listings answer one page, oldest first).
   */
  async function getAll(path) {
    const items = [];
    const sep = path.includes('?') ? '&' : '?';
    let cursor = null;
    do {
      const url = `${path}${sep}limit=${MAX_LIST_LIMIT}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : '');
      const page = await getPage(url);
      items.push(...page.body);
      cursor = page.next;
    } while (cursor);
    return items;
  }

  /** A JSON answer and the cursor of the next page, if the listing has one. */
  async function getPage(path) {
    const res = await fetch(path, { cache: 'no-store', headers: apiHeaders() });
    if (res.status === 401) {
      const body = await res.json().catch(() => ({}));
      askForToken(body && body.error ? body.error.message : 'the gateway asks for a token');
      throw new Error(`${path}: sign in again`);
    }
    if (!res.ok) {
      let message = `HTTP ${res.status}`;
      try {
        const body = await res.json();
        if (body && body.error && body.error.message) message = body.error.message;
      } catch (_) {
        // Not JSON: keep the status.
      }
      throw new Error(`${path}: ${message}`);
    }
    return { body: await res.json(), next: res.headers.get(NEXT_CURSOR_HEADER) };
  }

  /** Re-reads servers and deployments; events keep them current afterwards. */
  async function sync() {
    try {
      const [serverList, deploymentList] = await Promise.all([
        getAll('/v1/servers'),
        // Whole records: a finished one's output is shown from its record.
        getAll('/v1/deployments?include=output'),
      ]);
      for (const s of serverList) upsertServer(s);
      for (const id of [...servers.keys()]) {
        if (!serverList.some((s) => s.id === id)) removeServer(id);
      }
      for (const d of deploymentList) upsertDeployment(d, 'record');
      document.body.dataset.loaded = 'true';
    } catch (e) {
      showBanner(`Cannot read the gateway: ${e.message}`);
    }
    refreshStats();
  }

  const fetching = new Map(); // deployment id being read → read it again when done
  const unread = new Set(); // deployments first seen in events, to be read
  let readTimer = null;

  /**
   * Reads a deployment first seen in an event (its name, exact times) soon. A page that
   * opens on a busy system replays many such events at once: read them with one
   * listing rather than one request each.
   */
  function readSoon(id) {
    unread.add(id);
    if (readTimer === null) readTimer = setTimeout(readUnread, READ_DELAY_MS);
  }

  async function readUnread() {
    readTimer = null;
    const ids = [...unread];
    unread.clear();
    if (ids.length < BATCH_READ_MIN) {
      for (const id of ids) fetchDeployment(id);
      return;
    }
    try {
      // The listing is in creation order, page by page: read it through rather than
      // one request per deployment.
      const wanted = new Set(ids);
      for (const d of await getAll('/v1/deployments?include=output')) {
        if (wanted.has(d.id)) upsertDeployment(d, 'record');
      }
    } catch (e) {
      showBanner(`Cannot read deployments: ${e.message}`);
    }
  }

  /** Reads one deployment; asked again while a read is on its way, reads once more after it. */
  async function fetchDeployment(id) {
    if (fetching.has(id)) {
      fetching.set(id, true);
      return;
    }
    fetching.set(id, false);
    try {
      upsertDeployment(await getJson(`/v1/deployments/${encodeURIComponent(id)}`), 'record');
    } catch (e) {
      showBanner(`Cannot read deployment ${id}: ${e.message}`);
    } finally {
      const again = fetching.get(id);
      fetching.delete(id);
      if (again) fetchDeployment(id);
    }
  }

  // ---------- servers ----------

  function upsertServer(s) {
    let entry = servers.get(s.id);
    if (!entry) {
      entry = {
        id: s.id,
        since: null,
        status: null,
        name: el('span', { class: 'sub' }),
        presence: el('span', { class: 'presence' }, el('span', { class: 'dot' }), el('span', { class: 'label' })),
        sinceCell: el('td', { class: 'time' }),
      };
      entry.row = el('tr', { 'data-server-id': s.id },
        el('td', { class: 'server' }, el('span', { class: 'id', text: s.id }), entry.name),
        el('td', { class: 'presence-cell' }, entry.presence),
        entry.sinceCell);
      const body = $('servers').tBodies[0];
      const after = [...body.rows].find((r) => r.dataset.serverId > s.id);
      body.insertBefore(entry.row, after || null);
      servers.set(s.id, entry);
    }
    entry.name.textContent = s.name && s.name !== s.id ? s.name : '';
    const p = s.presence || { status: 'unknown' };
    setPresence(entry, p.status, p.since || null, p.reason || null);
    $('servers-empty').hidden = servers.size > 0;
  }

  /** Applies a presence unless a newer one is already shown. */
  function setPresence(entry, status, since, reason) {
    const ms = parseTime(since);
    const shown = parseTime(entry.since);
    // The newer fact wins; one without a time never replaces one with a time.
    if (entry.status && shown !== null && (ms === null || ms < shown)) return;
    entry.status = status || 'unknown';
    entry.since = since;
    entry.presence.dataset.status = entry.status;
    entry.presence.querySelector('.label').textContent = entry.status;
    entry.presence.title = reason ? `${entry.status}: ${reason}` : entry.status;
    setTime(entry.sinceCell, since);
    refreshStats();
  }

  function removeServer(id) {
    const entry = servers.get(id);
    if (!entry) return;
    entry.row.remove();
    servers.delete(id);
    $('servers-empty').hidden = servers.size > 0;
  }

  // ---------- deployments ----------

  function newDeployment(d) {
    const cells = {
      name: el('td', { class: 'name' }),
      server: el('td', { class: 'server', text: d.server_id }),
      state: el('td', { class: 'state' }),
      detail: el('td', { class: 'detail' }, el('span', { class: 'text' })),
      updated: el('td', { class: 'time' }),
    };
    const row = el('tr', { class: 'summary', 'data-deployment-id': d.id, tabindex: 0, 'aria-expanded': 'false' },
      ...Object.values(cells));
    const output = el('pre', { class: 'output', 'data-output-for': d.id });
    const detail = el('div', { class: 'deployment-detail', 'data-detail-for': d.id });
    const outputRow = el('tr', { class: 'output-row', hidden: '' },
      el('td', { colspan: 5 }, detail, output));
    const group = el('tbody', { class: 'deployment', 'data-deployment-group': d.id }, row, outputRow);
    const entry = {
      id: d.id, data: {}, rank: -1, created: parseTime(d.created_at) ?? Date.now(),
      group, row, outputRow, output, detail, cells,
      // Live output: seen from the start, in full, or to be replaced by the final result.
      outputMode: 'live', liveFromStart: false, lastProgress: -1, liveLines: 0, liveGaps: false,
      userToggled: false,
    };
    const toggle = () => {
      entry.userToggled = true;
      setOpen(entry, entry.outputRow.hidden);
    };
    row.addEventListener('click', toggle);
    row.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(); }
    });
    deployments.set(d.id, entry);
    placeDeployment(entry);
    trimDeployments();
    $('deployments-empty').hidden = true;
    scheduleView();
    return entry;
  }

  /** True when `a` goes above `b`: created later, or at the same time with a larger id. */
  const newer = (a, b) => a.created > b.created || (a.created === b.created && a.id > b.id);

  /**
   * Keeps the groups newest first: before the newest of those older than it. Ties of
   * `created` (milliseconds) are common, so the id decides there, the same way as in
   * the table's order.
   */
  function placeDeployment(entry) {
    const table = $('deployments');
    let next = null;
    for (const other of deployments.values()) {
      if (other === entry || other.group.parentNode !== table || !newer(entry, other)) continue;
      if (next === null || newer(other, next)) next = other;
    }
    table.insertBefore(entry.group, next ? next.group : null);
  }

  function trimDeployments() {
    if (deployments.size <= MAX_DEPLOYMENTS) return;
    const oldest = [...deployments.values()]
      .filter((e) => e.rank === 2)
      .sort((a, b) => a.created - b.created);
    for (const e of oldest.slice(0, deployments.size - MAX_DEPLOYMENTS)) {
      e.group.remove();
      deployments.delete(e.id);
    }
  }

  const autoOpened = []; // entries whose output opened by itself, oldest first

  function setOpen(entry, open) {
    entry.outputRow.hidden = !open;
    if (open) renderDetail(entry);
    entry.row.setAttribute('aria-expanded', String(open));
    entry.row.classList.toggle('open', open);
    // A finished deployment's result is read when its output is shown, not before.
    if (open && entry.outputMode === 'live' && entry.rank === 2 && !liveOutputComplete(entry)) {
      fetchDeployment(entry.id);
    }
  }

  /** Shows live output as it comes, with at most MAX_AUTO_OPEN panels open by themselves. */
  function autoOpen(entry) {
    if (entry.userToggled || !entry.outputRow.hidden) return;
    setOpen(entry, true);
    autoOpened.push(entry);
    while (autoOpened.length > MAX_AUTO_OPEN) {
      const oldest = autoOpened.shift();
      if (!oldest.userToggled && deployments.get(oldest.id) === oldest) setOpen(oldest, false);
    }
  }

  /**
   * Merges what is known of a deployment: a full record from a read (`record`), or an
   * event's data with the state it implies (`event`). A state never moves back.
   */
  function upsertDeployment(d, origin, detail, time) {
    const entry = deployments.get(d.id) || newDeployment(d);
    const status = d.status;
    const rank = RANK[status] ?? -1;
    if (origin === 'record') {
      const created = parseTime(d.created_at);
      if (created !== null && created !== entry.created) {
        entry.created = created;
        placeDeployment(entry);
      }
      entry.data = Object.assign({}, entry.data, d);
      if (entry.rank < 0 && status === 'QUEUED') entry.liveFromStart = true;
    } else {
      for (const key of ['server_id', 'config_id', 'action', 'stack_id', 'resource_name']) {
        if (d[key] !== undefined) entry.data[key] = d[key];
      }
    }
    renderIdentity(entry);
    if (!entry.outputRow.hidden) renderDetail(entry);
    scheduleView();
    if (rank < entry.rank || (rank === 2 && entry.rank === 2 && origin === 'event')) {
      if (origin === 'record' && rank === 2) finishOutput(entry, d);
      return entry;
    }
    entry.rank = rank;
    entry.data.status = status;
    const shown = shownState(entry.data);
    entry.cells.state.replaceChildren(el('span', { class: 'badge', 'data-state': shown, text: shown }));
    let text = detail !== undefined ? detail : recordDetail(d);
    if (shown === 'DRIFTED') text = `drift found: ${text}`;
    entry.cells.detail.firstChild.textContent = text;
    entry.cells.detail.title = text;
    setTime(entry.cells.updated, time || d.updated_at);
    if (rank === 2) {
      if (origin === 'record') finishOutput(entry, d);
      else if (!liveOutputComplete(entry) && !entry.outputRow.hidden) fetchDeployment(entry.id);
    }
    refreshStats();
    return entry;
  }

  /**
   * The state a deployment's badge shows: its status, except that a `CHECK` that ended
   * FAILED found drift (what it is for): `DRIFTED`, neither a failure nor counted as one.
   */
  function shownState(d) {
    return d.status === 'FAILED' && d.action === CHECK ? 'DRIFTED' : d.status;
  }

  /** Name (or id), then id, what it applies, and its stack, as muted lines. */
  function renderIdentity(entry) {
    const d = entry.data;
    const name = d.name && d.name !== entry.id ? d.name : null;
    const what = [d.action, d.config_id && `config ${d.config_id}`].filter(Boolean).join(' · ');
    const stack = d.stack_id ? `stack ${d.stack_id}${d.resource_name ? ` · ${d.resource_name}` : ''}` : '';
    entry.cells.name.replaceChildren(
      name ? el('span', { class: 'label', text: name }) : '',
      el('span', { class: name ? 'sub id' : 'label id', text: entry.id }),
      what ? el('span', { class: 'sub', text: what }) : '',
      stack ? el('span', { class: 'sub', text: stack }) : '');
    if (d.server_id) entry.cells.server.textContent = d.server_id;
  }

  /** A value as text: strings as they are, the rest as JSON; a hidden one masked. */
  function valueNode(value) {
    if (value === HIDDEN) return el('span', { class: 'masked', title: 'hidden: never shown', text: '•••••• hidden' });
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    return el('span', { class: 'value', text });
  }

  /** A two-column table of `values` (name → value), or a note when there are none. */
  function valuesTable(values, cls, none) {
    const names = Object.keys(values || {}).sort();
    if (names.length === 0) return el('p', { class: 'sub none', text: none });
    return el('table', { class: `kv ${cls}` }, el('tbody', {},
      ...names.map((n) => el('tr', { 'data-name': n },
        el('th', { text: n }), el('td', {}, valueNode(values[n]))))));
  }

  /** Inputs (hidden ones masked), outputs, timings and exit code of an opened deployment. */
  function renderDetail(entry) {
    const d = entry.data;
    const times = [
      ['Created', when(d.created_at)],
      ['Delivered', when(d.delivered_at)],
      ['Started', when(d.started_at)],
      ['Finished', when(d.finished_at)],
      ['Duration', d.started_at ? duration(d.started_at, d.finished_at) : duration(d.created_at, d.finished_at)],
      ['Exit code', d.deploy_status_code != null ? String(d.deploy_status_code) : '–'],
    ];
    entry.detail.replaceChildren(
      el('dl', { class: 'timings' }, ...times.flatMap(([k, v]) => [
        el('dt', { text: k }), el('dd', { 'data-timing': k.toLowerCase().replace(' ', '-'), text: v })])),
      el('div', { class: 'io' },
        el('div', {}, el('h4', { text: 'Inputs' }), valuesTable(d.input_values, 'inputs', 'No inputs.')),
        el('div', {}, el('h4', { text: 'Outputs' }), valuesTable(d.outputs, 'outputs',
          RANK[d.status] === 2 ? 'No outputs.' : 'Not finished yet.')))
    );
  }

  // ---------- filters and pages ----------

  let page = 0; // 0: the newest deployments
  let viewTimer = null;

  /** Applies filters and the page soon (once for many changes). */
  function scheduleView() {
    if (viewTimer === null) viewTimer = setTimeout(applyView, 0);
  }

  function filters() {
    return {
      server: $('filter-server').value,
      stack: $('filter-stack').value,
      status: $('filter-status').value,
    };
  }

  function matches(entry, f) {
    const d = entry.data;
    return (!f.server || d.server_id === f.server)
      && (!f.stack || d.stack_id === f.stack)
      && (!f.status || shownState(d) === f.status);
  }

  /** Keeps a select's options equal to `values` (sorted), its choice kept. */
  function setOptions(select, values) {
    const wanted = ['', ...[...values].sort()];
    const have = [...select.options].map((o) => o.value);
    if (wanted.length === have.length && wanted.every((v, i) => v === have[i])) return;
    const chosen = select.value;
    select.replaceChildren(...wanted.map((v) => el('option', { value: v, text: v || 'all' })));
    select.value = wanted.includes(chosen) ? chosen : '';
  }

  /** Shows the deployments that match the filters, one page of them, newest first. */
  function applyView() {
    viewTimer = null;
    const serverIds = new Set(servers.keys());
    const stackIds = new Set(knownStacks);
    for (const e of deployments.values()) {
      if (e.data.server_id) serverIds.add(e.data.server_id);
      if (e.data.stack_id) stackIds.add(e.data.stack_id);
    }
    setOptions($('filter-server'), serverIds);
    setOptions($('filter-stack'), stackIds);
    const f = filters();
    const groups = [...$('deployments').tBodies].filter((g) => g.classList.contains('deployment'));
    const shown = groups.filter((g) => {
      const entry = deployments.get(g.dataset.deploymentGroup);
      return entry && matches(entry, f);
    });
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    if (page >= pages) page = pages - 1;
    const first = page * PAGE_SIZE;
    const onPage = new Set(shown.slice(first, first + PAGE_SIZE));
    for (const g of groups) g.hidden = !onPage.has(g);
    $('page-info').textContent = shown.length === 0
      ? 'none match'
      : `${first + 1}–${Math.min(first + PAGE_SIZE, shown.length)} of ${shown.length}`;
    $('page-prev').disabled = page === 0;
    $('page-next').disabled = page >= pages - 1;
    $('deployments-pager').dataset.page = String(page + 1);
    $('deployments-pager').dataset.pages = String(pages);
    applyFeedFilter();
  }

  /** Hides the feed's events the filters leave out (progress unless asked for). */
  function applyFeedFilter() {
    for (const item of $('feed').children) item.hidden = !feedShows(item);
  }

  function feedShows(item) {
    const f = filters();
    const type = $('filter-type').value;
    if (item.dataset.type === 'deployment.progress' && !$('show-progress').checked) return false;
    if (type && item.dataset.kind !== type) return false;
    if (f.server && item.dataset.server !== f.server) return false;
    if (f.stack && item.dataset.stack !== f.stack) return false;
    return true;
  }

  function recordDetail(d) {
    if (d.status === 'FAILED') return d.status_reason || 'failed';
    if (d.status === 'COMPLETE') return d.deploy_status_code != null ? `exit ${d.deploy_status_code}` : '';
    if (d.status === 'IN_PROGRESS') return 'running';
    if (d.status === 'QUEUED') return d.delivered_at ? 'delivered to the agent' : 'waiting for the agent';
    return '';
  }

  function liveOutputComplete(entry) {
    return entry.liveFromStart && !entry.liveGaps && entry.liveLines > 0;
  }

  /** A finished deployment's output: the live lines if they are all there, else the result's. */
  function finishOutput(entry, d) {
    if (entry.outputMode === 'final' || liveOutputComplete(entry)) return;
    entry.outputMode = 'final';
    entry.output.replaceChildren();
    const lines = [];
    for (const [stream, text] of [['stdout', d.deploy_stdout], ['stderr', d.deploy_stderr]]) {
      if (!text) continue;
      for (const line of text.replace(/\n$/, '').split('\n')) lines.push({ stream, text: line });
    }
    if (lines.length === 0) {
      entry.output.append(el('span', { class: 'line note', text: 'The hook printed nothing.' }));
      return;
    }
    appendLines(entry, lines, 'result');
  }

  function appendLines(entry, lines, origin) {
    const out = entry.output;
    const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    for (const line of lines) {
      out.append(el('span', {
        class: 'line', 'data-stream': line.stream || 'stdout', 'data-source': origin,
      }, `${String(line.text).replace(/\n$/, '')}\n`));
    }
    while (out.childElementCount > MAX_OUTPUT_LINES) {
      out.firstElementChild.remove();
      entry.liveGaps = true;
    }
    if (atBottom) out.scrollTop = out.scrollHeight;
  }

  function onProgress(ev, data) {
    let entry = deployments.get(data.deployment_id);
    if (!entry) {
      entry = upsertDeployment(
        { id: data.deployment_id, server_id: data.server_id, status: 'IN_PROGRESS' }, 'event', 'running', ev.time);
      readSoon(data.deployment_id);
    }
    if (entry.outputMode === 'final') return;
    if (typeof data.seq === 'number') {
      if (data.seq <= entry.lastProgress) return; // a replay after a reconnect
      entry.lastProgress = data.seq;
    }
    const lines = Array.isArray(data.lines) ? data.lines : [];
    appendLines(entry, lines, 'progress');
    entry.liveLines += lines.length;
    if (data.dropped_lines > 0 || data.truncated) {
      entry.liveGaps = true;
      const note = data.dropped_lines > 0 ? `… ${data.dropped_lines} lines dropped (rate limit)` : '… output truncated (size limit)';
      entry.output.append(el('span', { class: 'line note', text: note }));
    }
    autoOpen(entry);
  }

  // ---------- events ----------

  const DEPLOYMENT_DETAIL = {
    queued: () => 'waiting for the agent',
    delivered: () => 'delivered to the agent',
    started: () => 'running',
    completed: (d) => (d.deploy_status_code != null ? `exit ${d.deploy_status_code}` : ''),
    failed: (d) => d.status_reason || 'failed',
    timed_out: (d) => d.status_reason || 'timed out',
  };
  const DEPLOYMENT_STATE = {
    queued: 'QUEUED', delivered: 'QUEUED', started: 'IN_PROGRESS',
    completed: 'COMPLETE', failed: 'FAILED', timed_out: 'FAILED',
  };

  function handle(ev, seq) {
    if (!ev || typeof ev.type !== 'string') return;
    const short = ev.type.startsWith(TYPE_PREFIX) ? ev.type.slice(TYPE_PREFIX.length) : ev.type;
    const [kind, name] = short.split('.');
    const data = ev.data || {};
    addToFeed(ev, short, kind, data, seq);
    if ((kind === 'stack' || kind === 'group') && data.stack_id) stackChanged(data.stack_id);
    if (kind === 'server') onServerEvent(name, ev, data);
    else if (kind === 'deployment' && name === 'progress') onProgress(ev, data);
    else if (kind === 'deployment' && DEPLOYMENT_STATE[name]) {
      const known = deployments.has(data.deployment_id);
      const d = Object.assign({}, data, { id: data.deployment_id, status: DEPLOYMENT_STATE[name] });
      if (!known && name === 'queued') d.created_at = ev.time;
      const entry = upsertDeployment(d, 'event', DEPLOYMENT_DETAIL[name](data), ev.time);
      if (!known) {
        if (name === 'queued') entry.liveFromStart = true;
        readSoon(data.deployment_id); // name, inputs, exact times
      }
    }
  }

  function onServerEvent(name, ev, data) {
    const id = data.server_id;
    if (!id) return;
    if (name === 'deregistered') { removeServer(id); refreshStats(); return; }
    if (!servers.has(id)) upsertServer({ id, name: data.name || '', presence: null });
    const entry = servers.get(id);
    if (name === 'online' || name === 'offline') setPresence(entry, name, ev.time, data.reason || null);
  }

  function summary(kind, name, data) {
    if (kind === 'deployment') {
      if (name === 'progress') {
        const n = Array.isArray(data.lines) ? data.lines.length : 0;
        return `${n} line${n === 1 ? '' : 's'}${data.dropped_lines ? `, ${data.dropped_lines} dropped` : ''}`;
      }
      const parts = [data.server_id, data.action].filter(Boolean);
      if (data.status_reason) parts.push(data.status_reason);
      return parts.join(' · ');
    }
    if (kind === 'server') return data.reason || data.name || '';
    if (kind === 'stack') {
      // A unit an operation planned (`INIT_COMPLETE`) has not run.
      const unitStatus = data.unit_status === 'INIT_COMPLETE' ? 'planned' : data.unit_status;
      return [data.unit, unitStatus || data.status, data.reason].filter(Boolean).join(' · ');
    }
    if (kind === 'group') return `${data.group}/${data.member} on ${data.server_id}`;
    return '';
  }

  function addToFeed(ev, short, kind, data, seq) {
    if (ev.id) {
      if (seenEvents.has(ev.id)) return;
      seenEvents.set(ev.id, true);
      if (seenEvents.size > 10000) seenEvents.delete(seenEvents.keys().next().value);
    }
    const name = short.split('.').slice(1).join('.');
    const subject = ev.deployment || ev.stack || ev.server || ev.subject || '';
    const time = el('time', { class: 'clock', datetime: ev.time });
    setTime(time, ev.time);
    const sum = summary(kind, name, data);
    const item = el('li', {
      class: 'event', 'data-kind': kind, 'data-type': short, 'data-seq': seq || undefined,
      'data-server': data.server_id || ev.server || undefined,
      'data-stack': data.stack_id || ev.stack || undefined,
    },
      time,
      el('span', { class: 'type', text: short }),
      el('span', { class: 'subject', text: subject }),
      el('span', { class: 'summary', text: sum, title: sum }));
    if (ev.deployment) {
      item.classList.add('link');
      item.addEventListener('click', () => {
        const entry = deployments.get(ev.deployment);
        if (!entry) return;
        entry.userToggled = true;
        setOpen(entry, true);
        entry.row.scrollIntoView({ block: 'nearest' });
        entry.row.focus();
      });
    }
    item.hidden = !feedShows(item);
    const feed = $('feed');
    feed.insertBefore(item, feed.firstChild);
    while (feed.childElementCount > MAX_FEED) feed.lastElementChild.remove();
    $('feed-empty').hidden = true;
    $('events-count').textContent = String(feed.childElementCount);
  }

  // ---------- stacks ----------

  const knownStacks = new Set(); // stack ids seen, for the stack filter
  let stackCursors = [null]; // cursor of each stacks page read so far (page 1: none)
  let stackPage = 0;
  let openStack = null; // the stack whose detail is shown
  let stacksTimer = null;

  function stackStatus(status) {
    return status ? `${status.action}_${status.status}` : '–';
  }

  /** A unit's state; one never run (`INIT`, planned only) is no success. */
  function unitBadge(u) {
    if (u.action === 'INIT') {
      return el('span', { class: 'badge', 'data-state': 'NOT_RUN', title: 'planned, never run', text: 'NOT RUN' });
    }
    return badge(`${u.action}_${u.status}`);
  }

  function badge(state) {
    return el('span', { class: 'badge', 'data-state': state.replace(/^[A-Z]+_(?=IN_PROGRESS|COMPLETE|FAILED)/, ''), text: state });
  }

  /** A stack event: its list and, if open, its detail are read again soon. */
  function stackChanged(id) {
    const known = knownStacks.has(id);
    knownStacks.add(id);
    if (!known) scheduleView();
    if ($('stacks-view').hidden) return;
    if (stacksTimer !== null) clearTimeout(stacksTimer);
    stacksTimer = setTimeout(() => {
      stacksTimer = null;
      loadStacks();
      if (openStack) showStack(openStack);
    }, 300);
  }

  /** Reads the current page of stacks (GET /v1/stacks, one API page). */
  async function loadStacks() {
    try {
      const cursor = stackCursors[stackPage];
      const path = `/v1/stacks?limit=${STACK_PAGE_SIZE}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : '');
      const answer = await getPage(path);
      stackCursors = stackCursors.slice(0, stackPage + 1);
      if (answer.next) stackCursors.push(answer.next);
      const body = $('stacks').tBodies[0];
      body.replaceChildren(...answer.body.map((st) => {
        knownStacks.add(st.id);
        const row = el('tr', { class: 'summary', 'data-stack-id': st.id, tabindex: 0 },
          el('td', {}, el('span', { class: 'label id', text: st.id })),
          el('td', {}, badge(stackStatus(st.status))),
          el('td', { class: 'time' }),
          el('td', { class: 'time' }));
        setTime(row.cells[2], st.created_at);
        setTime(row.cells[3], st.updated_at);
        if (st.id === openStack) row.classList.add('open');
        const open = () => showStack(st.id);
        row.addEventListener('click', open);
        row.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
        return row;
      }));
      $('stacks-empty').hidden = answer.body.length > 0 || stackPage > 0;
      $('stacks-page-info').textContent = `page ${stackPage + 1}`;
      $('stacks-prev').disabled = stackPage === 0;
      $('stacks-next').disabled = !answer.next;
      $('stacks-count').textContent = String(knownStacks.size);
      document.body.dataset.stacksLoaded = 'true';
      scheduleView();
    } catch (e) {
      showBanner(`Cannot read stacks: ${e.message}`);
    }
  }

  /** The detail of stack `id`: status, outputs, units and its operations, newest first. */
  async function showStack(id) {
    openStack = id;
    for (const row of $('stacks').tBodies[0].rows) row.classList.toggle('open', row.dataset.stackId === id);
    try {
      const path = `/v1/stacks/${encodeURIComponent(id)}`;
      const [st, ops] = await Promise.all([
        getJson(path),
        getPage(`${path}/operations?limit=${STACK_OPERATIONS}`).then((p) => p.body),
      ]);
      if (openStack !== id) return;
      $('stack-title').replaceChildren('Stack ', el('span', { class: 'id', text: st.id }));
      $('stack-status').replaceChildren(badge(stackStatus(st.status)));
      $('stack-reason').textContent = st.status && st.status.reason ? st.status.reason : '';
      const outputs = (st.state && st.state.outputs) || {};
      $('stack-outputs').replaceChildren(valuesTable(outputs, 'stack-outputs', 'No outputs.'));
      const units = Object.entries((st.state && st.state.units) || {}).sort(([a], [b]) => a.localeCompare(b));
      $('stack-units').tBodies[0].replaceChildren(...units.map(([key, u]) => el('tr', { 'data-unit': key },
        el('td', {}, el('span', { class: 'id', text: key })),
        el('td', {}, el('span', { class: 'id', text: u.server_id })),
        el('td', {}, unitBadge(u), u.status_reason ? el('span', { class: 'sub reason', text: u.status_reason }) : ''),
        el('td', {}, el('span', { class: 'id', text: u.last || u.current || '–' })))));
      $('stack-operations').tBodies[0].replaceChildren(...ops.map((op) => {
        const row = el('tr', { 'data-operation': op.id },
          el('td', {}, el('span', { class: 'label', text: op.operation }), el('span', { class: 'sub id', text: op.id }),
            op.cause ? el('span', { class: 'sub reason cause', text: op.cause }) : ''),
          el('td', {}, el('span', { class: 'badge', 'data-state': op.state === 'succeeded' ? 'COMPLETE' : op.state === 'failed' ? 'FAILED' : 'IN_PROGRESS', text: op.state })),
          el('td', { class: 'time' }), el('td', { class: 'time' }),
          el('td', { class: 'detail', text: op.reason || '' }));
        setTime(row.cells[2], op.submitted_at);
        setTime(row.cells[3], op.finished_at);
        return row;
      }));
      $('operations-empty').hidden = ops.length > 0;
      $('stack-body').hidden = false;
      document.body.dataset.stackShown = id;
    } catch (e) {
      showBanner(`Cannot read stack ${id}: ${e.message}`);
    }
  }

  /** Overview (servers, deployments, events) or stacks. */
  function showView(name) {
    for (const b of document.querySelectorAll('nav.views button')) {
      b.setAttribute('aria-pressed', String(b.dataset.view === name));
    }
    $('main').hidden = name !== 'overview';
    $('stacks-view').hidden = name !== 'stacks';
    document.body.dataset.view = name;
    if (name === 'stacks') {
      loadStacks();
      if (openStack) showStack(openStack);
    }
  }

  // ---------- header: stats, connection, banner ----------

  function refreshStats() {
    const all = [...servers.values()];
    $('stat-online').textContent = `${all.filter((s) => s.status === 'online').length} / ${all.length}`;
    const shown = [...deployments.values()];
    $('stat-running').textContent = String(shown.filter((e) => e.data.status === 'IN_PROGRESS').length);
    // A drift-detecting CHECK is not a failure.
    $('stat-failed').textContent = String(shown.filter((e) => shownState(e.data) === 'FAILED').length);
    $('stat-drifted').textContent = String(shown.filter((e) => shownState(e.data) === 'DRIFTED').length);
    $('servers-count').textContent = String(servers.size);
    $('deployments-count').textContent = String(deployments.size);
  }

  function setConnection(state, label) {
    const node = $('connection');
    node.dataset.state = state;
    node.querySelector('.label').textContent = label || state;
    node.title = lastSeq ? `Event stream · last event #${lastSeq}` : 'Event stream';
  }

  function showBanner(text) {
    const banner = $('banner');
    banner.querySelector('.message').textContent = text;
    delete banner.dataset.code;
    banner.hidden = false;
  }

  function onStreamError(m) {
    let info = {};
    try { info = JSON.parse(m.data); } catch (_) { /* keep the defaults */ }
    const what = info.message || 'the event stream reported an error';
    showBanner(`Some events were missed: ${what}. Servers and deployments were re-read; the event feed has a gap.`);
    $('banner').dataset.code = info.code || 'error';
    sync();
  }

  /** A ticket for the event stream (`&ticket=…`), or '' on a gateway without tokens. */
  async function streamTicket() {
    if (!sessionStorage.getItem(TOKEN_KEY)) return '';
    const res = await fetch('/v1/events/tickets', { method: 'POST', cache: 'no-store', headers: apiHeaders() });
    if (res.status === 401) {
      const body = await res.json().catch(() => ({}));
      askForToken(body && body.error ? body.error.message : 'the gateway asks for a token');
      return null;
    }
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const body = await res.json();
    return `&ticket=${encodeURIComponent(body.ticket)}`;
  }

  /** Follows GET /v1/events; the browser reconnects with Last-Event-ID by itself (the
   *  ticket lasts 60 s: a later reconnect is refused, and a new ticket is fetched then). */
  async function connect() {
    const query = lastSeq !== null
      ? `after=${encodeURIComponent(lastSeq)}`
      : `since=${encodeURIComponent(new Date(Date.now() - REPLAY_MINUTES * 60000).toISOString())}`;
    let ticket;
    try {
      ticket = await streamTicket();
    } catch (_) {
      setConnection('offline', 'disconnected');
      setTimeout(connect, RETRY_MS);
      return;
    }
    if (ticket === null) return;
    source = new EventSource(`/v1/events?${query}${ticket}`);
    let dropped = false;
    source.onopen = () => {
      setConnection('live');
      if (dropped) sync(); // presence may have changed while nothing arrived
    };
    source.onmessage = (m) => {
      if (m.lastEventId) lastSeq = m.lastEventId;
      let ev;
      try { ev = JSON.parse(m.data); } catch (_) { return; }
      handle(ev, m.lastEventId);
    };
    source.addEventListener('flue-error', onStreamError);
    const own = source;
    source.onerror = () => {
      dropped = true;
      // Signed out (or replaced) meanwhile: this stream is over, nothing to retry.
      if (source !== own) return;
      if (own.readyState === EventSource.CLOSED) {
        setConnection('offline', 'disconnected');
        own.close();
        // A fresh ticket: the old one may have run out (60 s).
        setTimeout(connect, RETRY_MS);
      } else {
        setConnection('reconnecting');
      }
    };
  }

  // ---------- signing in ----------

  /** Shows the sign-in form (the token kept so far is dropped), with why. */
  function askForToken(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (source) source.close();
    source = null;
    setConnection('offline', 'signed out');
    const error = $('login-error');
    error.textContent = why || '';
    error.hidden = !why;
    $('main').hidden = true;
    $('stacks-view').hidden = true;
    $('login').hidden = false;
    document.body.dataset.auth = 'login';
    $('login-token').focus();
  }

  /** Starts reading once the gateway accepts the session's token (or needs none). */
  async function begin() {
    let res = null;
    try {
      res = await fetch('/v1/servers', { cache: 'no-store', headers: apiHeaders() });
    } catch (_) {
      // The gateway is not reachable: go on, the reads and the stream say so and retry.
    }
    if (res && res.status === 401) {
      const body = await res.json().catch(() => ({}));
      const had = sessionStorage.getItem(TOKEN_KEY);
      askForToken(had && body && body.error ? `Token refused: ${body.error.message}` : '');
      return;
    }
    $('login').hidden = true;
    showView(document.body.dataset.view || 'overview');
    document.body.dataset.auth = 'ok';
    refreshStats();
    connect();
    sync();
  }

  function start() {
    $('banner').querySelector('.dismiss').addEventListener('click', () => { $('banner').hidden = true; });
    const now = new Date();
    const zone = (Intl.DateTimeFormat().resolvedOptions().timeZone) || zoneName(now);
    $('timezone').textContent = `Times in ${zone} (${offset(now)})`;
    for (const id of ['filter-server', 'filter-stack', 'filter-status']) {
      $(id).addEventListener('change', () => { page = 0; applyView(); });
    }
    $('filter-type').addEventListener('change', applyFeedFilter);
    $('show-progress').addEventListener('change', applyFeedFilter);
    $('page-prev').addEventListener('click', () => { if (page > 0) { page -= 1; applyView(); } });
    $('page-next').addEventListener('click', () => { page += 1; applyView(); });
    $('stacks-prev').addEventListener('click', () => { if (stackPage > 0) { stackPage -= 1; loadStacks(); } });
    $('stacks-next').addEventListener('click', () => {
      if (stackCursors[stackPage + 1]) { stackPage += 1; loadStacks(); }
    });
    for (const b of document.querySelectorAll('nav.views button')) {
      b.addEventListener('click', () => showView(b.dataset.view));
    }
    $('login').addEventListener('submit', (e) => {
      e.preventDefault();
      const token = $('login-token').value.trim();
      $('login-token').value = '';
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      begin();
    });
    begin();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
