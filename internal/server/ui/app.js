// @ts-check
// Kokumi's UI: plain JavaScript, no build step (type-checked by tsc --noEmit from JSDoc, see
// test/browser). Hash routes, JSON from /api/v1, and server-sent events that say what changed:
// the page it shows is fetched again and patched in place (morph), so focus, selection, an open
// confirmation and what is typed survive. A banner says when the stream is down or the session
// ended.
"use strict";

/** @typedef {{status: string, reason?: string, message?: string}} Condition */
/** @typedef {{selected?: number, healthy?: number, progressing?: number, degraded?: number, held?: number, drifted?: number}} Counts */
/** @typedef {{namespace: string, name: string, order: string, preparation?: string, revision?: string, deployedSince?: string, clusters: Counts, ready: Condition}} ServingSummary */
/** @typedef {{cluster: string, application?: string, state: string, link?: string, health?: string, sync?: string, revision?: string, since?: string, reason?: string, message?: string}} ClusterRow */
/** @typedef {{environment: string, clusters: number, time: string}} Deployed */
/** @typedef {{name: string, created: string, digest: string, targetNamespace: string, ready: Condition, promoted?: boolean, running?: number, label?: string, blocked?: string, deployments?: Deployed[], custody?: string}} PreparationSummary */
/** @typedef {{mode: string, environment?: string, preparations: PreparationSummary[], preparationsOmitted?: number, current?: string, rollbackTo?: string}} Promotion */
/** @typedef {{allowed: boolean, reason?: string}} Can */
/** @typedef {{namespace: string, name: string, product: string, environment: string, mode: string, latestPreparation?: string, serving?: string, ready: Condition}} OrderSummary */
/** @typedef {{environment: string, state: string, message?: string, match?: string, soak?: string, left?: string, leftSeconds?: number, order?: string, serving?: string}} Stage */
/** @typedef {{environment: string, preparation?: string, allowed?: boolean, message?: string, stages: Stage[], error?: string}} Pipeline */
/** @typedef {{digest: string, environment?: string, clusters: number, time?: string, keyID?: string, verified?: boolean, problem?: string}} RecordItem */
/** @typedef {{preparation: string, artifact?: string, verify: string, items: RecordItem[], itemsOmitted?: number, error?: string}} Records */
/** @typedef {{name: string, selected: number, healthy: number, progressing: number, failed: number, waiting: number}} WaveCount */
/** @typedef {{name: string, wave?: string, kind: string, phase: string, passes?: number, failures?: number, runs?: number, started?: string, finished?: string, message?: string}} VerificationResult */
/** @typedef {{preparation: string, from?: string, state: string, wave?: string, waveHealthySince?: string, rollbackTo?: string, by?: string, nextWindow?: string, message?: string, waves?: WaveCount[], verifications?: VerificationResult[], awaiting?: string}} Rollout */
/** @typedef {{paused?: boolean, abort?: string, by?: string}} RolloutControl */
/** @typedef {{gate: string, wave?: string, preparation: string, required: number, approvers: string[], separateFromPromoter?: boolean, promotedBy?: string}} Approval */
/** @typedef {ServingSummary & {rows: ClusterRow[], rowsTotal?: number, rowsOmitted?: number, promotion?: Promotion, pipeline?: Pipeline, records?: Records, rollout?: Rollout, control?: RolloutControl, approval?: Approval, can?: Record<string, Can>, loadedAt?: number, missing?: undefined}} ServingDetail */
/** @typedef {{missing: true, namespace: string, name: string, order: OrderSummary}} MissingServing */
/** @typedef {{name: string, clusters: number, names: string[], moreNames?: number, notReady?: number, soak?: string, maxUnavailable: number}} WavePreview */
/** @typedef {{environment: string, found: boolean, allAtOnce: boolean, clusters: number, waves: WavePreview[], failureBudget: number, onFailure?: string, windows?: {open: boolean, nextOpen?: string, error?: string}, summary: string[]}} PlanPreview */
/** @typedef {{name: string, server: string, version?: string, labels?: Record<string, string>, ready: Condition}} ClusterSummary */
/** @typedef {{namespace: string, serving: string, application?: string, link?: string, state?: string, reason?: string, message?: string, health?: string, sync?: string, revision?: string, since?: string}} Deployment */
/** @typedef {ClusterSummary & {deployments: Deployment[], deploymentsOmitted?: number}} ClusterDetail */
/** @typedef {{name: string, clusters: number, readyClusters?: number, ready: Condition, requires?: {environment: string, soak?: string, match: string}[], approvals?: number}} EnvironmentSummary */
/** @typedef {{name: string, source: string, targetNamespace?: string}} ProductSummary */
/** @typedef {{kind: string, namespace?: string, name: string, yaml: string}} ManifestObject */
/** @typedef {{preparation: string, digest: string, images?: {original: string, pinned: string}[], objects?: ManifestObject[], objectsOmitted?: number, redacted?: string[], redactedNote?: string}} Manifests */
/** @typedef {{field: string, from: string, to: string}} FieldChange */
/** @typedef {{image: string, from: string, to: string, change: string}} ImageChange */
/** @typedef {{kind: string, namespace?: string, name: string, change: string, diff: string}} ObjectChange */
/** @typedef {{from: string, to: string, fields?: FieldChange[], images?: ImageChange[], objects?: ObjectChange[], objectsOmitted?: number, redacted?: string[], redactedNote?: string}} Diff */
/** @typedef {{current?: string, currentID?: string, keys: {id: string, pem: string}[], verify: string}} PublicKeys */
/** @typedef {{authenticated: boolean, user?: string, admin?: boolean}} Me */
/** @typedef {{field: string, message: string}} FieldError */
/** @typedef {{state: string, reason?: string, message?: string, preparation?: string, revision?: string, created?: string, target: boolean, since?: string}} FleetCell */
/** @typedef {{namespace: string, environment: string, order: string, preparation?: string, revision?: string}} FleetColumn */
/** @typedef {{cluster: string, ready: boolean, cells: (FleetCell | null)[]}} FleetRow */
/** @typedef {{environments: string[], columns: FleetColumn[], rows: FleetRow[], clusters: number, counts: Record<string, number>, rowsTotal: number, rowsOmitted?: number, next?: string}} FleetView */
/** @typedef {Node | string | number | boolean | null | undefined | ChildList} Child */
/** @typedef {Child[]} ChildList */
/** @typedef {Record<string, any>} Attrs */

/**
 * @template T
 * @typedef {{items: T[], omitted?: number}} List
 */

/**
 * A page: load fetches what it shows (again on every event), view builds its DOM from that,
 * title names it. A static page (a form) is mounted once and never refreshed by events.
 * @typedef {object} Page
 * @property {(args: string[], ui: any) => Promise<any>} [load]
 * @property {(data: any, args: string[], ui: any) => Child} [view]
 * @property {(data: any, args: string[]) => string} title
 * @property {(args: string[]) => Promise<void> | void} [mount]
 * @property {() => any} [init]
 * @property {boolean} [public]
 * @property {number} [refreshEvery] how often, at most, events fetch the page again, in ms (300 when unset)
 */

/** @param {string} id */
function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is missing from index.html`);
  return el;
}

const view = byId("view");
const banner = byId("banner");
const logoutButton = /** @type {HTMLButtonElement} */ (byId("logout"));
const whoami = byId("whoami");

// ---------------------------------------------------------------------------------------------
// DOM building and patching

/**
 * h builds an element: attributes (on* become event handler properties, which morph carries
 * over; "value" and "checked" set the property too), then children.
 * @param {string} tag
 * @param {Attrs | null} [attrs]
 * @param {...Child} children
 * @returns {HTMLElement}
 */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) /** @type {any} */ (el)[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  // A select's value picks one of its options: set it once they are there.
  for (const k of ["value", "checked"]) {
    if (attrs && attrs[k] !== undefined && attrs[k] !== null) /** @type {any} */ (el)[k] = attrs[k];
  }
  return el;
}

/**
 * @param {Node} el
 * @param {Child[]} children
 */
function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false || c === true || c === "") continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** The event handler properties morph carries from a new element to the one it keeps. */
const handlers = ["onclick", "oninput", "onchange", "onsubmit", "onkeydown", "ontoggle"];

/** @param {Node} n */
function keyOf(n) { return n instanceof Element ? n.getAttribute("data-key") : null; }

/**
 * @param {Node} a
 * @param {Node} b
 */
function sameKind(a, b) { return a.nodeType === b.nodeType && a.nodeName === b.nodeName && keyOf(a) === keyOf(b); }

/**
 * morph makes the children of target look like the nodes given, keeping every node that
 * matches (by data-key, else by position and tag) so focus, selection, open <details>, what is
 * typed into inputs and scroll positions survive.
 * @param {Element} target
 * @param {Node[]} nodes
 */
function morphChildren(target, nodes) {
  const old = Array.from(target.childNodes);
  /** @type {Map<string, Node>} */
  const keyed = new Map();
  /** @type {Node[]} */
  const unkeyed = [];
  for (const n of old) {
    const k = keyOf(n);
    if (k !== null && !keyed.has(k)) keyed.set(k, n);
    else unkeyed.push(n);
  }
  let u = 0;
  /** @type {Node[]} */
  const kept = [];
  for (const n of nodes) {
    const k = keyOf(n);
    /** @type {Node | undefined} */
    let match;
    if (k !== null) {
      match = keyed.get(k);
      if (match && !sameKind(match, n)) match = undefined;
      if (match) keyed.delete(k);
    } else if (u < unkeyed.length && sameKind(unkeyed[u], n)) {
      match = unkeyed[u++];
    }
    if (match) {
      morphNode(match, n);
      kept.push(match);
    } else {
      kept.push(n);
    }
  }
  const keep = new Set(kept);
  for (const n of old) if (!keep.has(n)) n.remove();
  // Put the kept nodes in order, moving only what is out of place (a moved node loses focus).
  let at = target.firstChild;
  for (const n of kept) {
    if (at === n) { at = n.nextSibling; continue; }
    target.insertBefore(n, at);
  }
}

/**
 * @param {Node} cur
 * @param {Node} next
 */
function morphNode(cur, next) {
  if (cur.nodeType !== Node.ELEMENT_NODE) {
    if (cur.nodeValue !== next.nodeValue) cur.nodeValue = next.nodeValue;
    return;
  }
  const a = /** @type {HTMLElement} */ (cur), b = /** @type {HTMLElement} */ (next);
  for (const attr of Array.from(a.attributes)) {
    if (!b.hasAttribute(attr.name) && !(attr.name === "open" && a.tagName === "DETAILS")) a.removeAttribute(attr.name);
  }
  for (const attr of Array.from(b.attributes)) {
    if (attr.name === "open" && a.tagName === "DETAILS") continue; // the person opens and closes them
    if (a.getAttribute(attr.name) !== attr.value) a.setAttribute(attr.name, attr.value);
  }
  for (const k of handlers) {
    const ax = /** @type {any} */ (a), bx = /** @type {any} */ (b);
    if (ax[k] !== bx[k]) ax[k] = bx[k];
  }
  // What a person types stays; a field they are not in follows the page's state.
  if (a instanceof HTMLInputElement || a instanceof HTMLSelectElement || a instanceof HTMLTextAreaElement) {
    const bv = /** @type {HTMLInputElement} */ (b).value;
    if (document.activeElement !== a && a.value !== bv && !(a instanceof HTMLSelectElement)) a.value = bv;
  }
  if (a instanceof HTMLSelectElement) {
    morphChildren(a, Array.from(b.childNodes));
    const bv = /** @type {HTMLSelectElement} */ (b).value;
    if (a.value !== bv) a.value = bv;
    return;
  }
  morphChildren(a, Array.from(b.childNodes));
}

/**
 * paintInto patches el's content to be nodes.
 * @param {Element} el
 * @param {Child} nodes
 */
function paintInto(el, nodes) {
  const frag = document.createDocumentFragment();
  append(frag, [nodes]);
  morphChildren(el, Array.from(frag.childNodes));
}

// ---------------------------------------------------------------------------------------------
// The API

class APIError extends Error {
  /**
   * @param {string} message
   * @param {number} status
   * @param {FieldError[]} fields
   */
  constructor(message, status, fields) {
    super(message);
    this.status = status;
    this.fields = fields;
  }
}

/**
 * @param {string} path
 * @param {RequestInit} [options]
 * @returns {Promise<any>}
 */
async function api(path, options) {
  const res = await fetch("/api/v1" + path, Object.assign({ credentials: "same-origin", cache: "no-store" }, options));
  const body = await res.json().catch(() => ({}));
  if (res.status === 401 && path !== "/login") {
    signedOut();
    throw new APIError(body.error || "sign in again", 401, []);
  }
  if (!res.ok) throw new APIError(body.error || res.statusText, res.status, body.fields || []);
  if (path !== "/me" || body.authenticated) signedIn = true;
  return body;
}

/**
 * @param {string} path
 * @param {any} body
 */
function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

/** @param {string} s */
const enc = s => encodeURIComponent(s);

// ---------------------------------------------------------------------------------------------
// Small pieces

/** @param {string | undefined} t */
function since(t) {
  if (!t) return "";
  const s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 90) return s + "s ago";
  if (s < 5400) return Math.round(s / 60) + "m ago";
  if (s < 129600) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

/**
 * soakLeft is the soak time a stage has left now: the server's count at the fetch, counted down
 * since (the server's words when it gave no count).
 * @param {Stage} st
 * @param {number | undefined} loadedAt
 */
function soakLeft(st, loadedAt) {
  if (st.leftSeconds === undefined || loadedAt === undefined) return st.left || "";
  const s = Math.max(0, Math.round(st.leftSeconds - (Date.now() - loadedAt) / 1000));
  if (s < 60) return s + "s";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}h${m ? m + "m" : ""}` : `${m}m`;
}

/** Each state's glyph: its shape tells it apart without its colour, and the word is beside it. */
/** @type {Record<string, [string, string]>} */
const glyphs = {
  Healthy: ["✓", "ok"], True: ["✓", "ok"], Passed: ["✓", "ok"], Synced: ["✓", "ok"], yes: ["✓", "ok"],
  Progressing: ["◐", "warn"], Soaking: ["◷", "warn"], Waiting: ["…", "warn"], Unknown: ["?", "warn"],
  OutOfSync: ["≠", "warn"], Suspended: ["‖", "warn"], Drifted: ["↯", "bad"],
  Degraded: ["✕", "bad"], False: ["✕", "bad"], no: ["✕", "bad"], Missing: ["∅", "bad"], Held: ["⊘", "bad"], Failed: ["✕", "bad"], Running: ["◐", "warn"],
};

/** @param {string | undefined} text */
function badge(text) {
  const word = text || "Unknown";
  const [glyph, tone] = glyphs[word] || ["•", "warn"];
  return h("span", { class: `status ${tone} ${word}` }, h("span", { class: "glyph", "aria-hidden": "true" }, glyph), " ", text || "—");
}

/** @param {string | undefined} rev */
function short(rev) { return rev ? h("code", { title: rev }, rev.replace(/^sha256:/, "").slice(0, 12)) : ""; }
/**
 * @param {number | undefined} n
 * @param {string} what
 */
function omitted(n, what) { return n ? h("p", { class: "note" }, `${n} more ${what} not shown.`) : ""; }
/**
 * @param {string | undefined} href
 * @param {string} text
 */
function link(href, text) { return href ? h("a", { href, target: "_blank", rel: "noopener" }, text) : text; }
/** @param {string} title */
function tab(title) { return h("h2", { class: "tabs" }, h("span", {}, title)); }
/**
 * @param {string} ns
 * @param {string} name
 */
function servingLink(ns, name) { return h("a", { href: `#/servings/${enc(ns)}/${enc(name)}` }, name); }

/**
 * @template T
 * @typedef {{label: string, cell: (row: T) => Child, class?: string, title?: (row: T) => string}} Column
 */

/**
 * table builds a table whose rows are keyed (so a patch keeps them) and whose cells carry their
 * column's label, which a phone shows beside each value (the rows become cards).
 * @template T
 * @param {Column<T>[]} columns
 * @param {T[]} rows
 * @param {(row: T) => string} key
 * @param {Attrs} [attrs]
 */
function table(columns, rows, key, attrs) {
  return h("div", Object.assign({ class: "table-wrap" }, attrs || {}),
    h("table", { class: "cards" },
      h("thead", {}, h("tr", {}, columns.map(c => h("th", { scope: "col" }, c.label)))),
      h("tbody", {}, rows.map(r => h("tr", { "data-key": key(r) },
        columns.map(c => h("td", { "data-label": c.label, class: c.class, title: c.title ? c.title(r) : undefined }, c.cell(r))))))));
}

// ---------------------------------------------------------------------------------------------
// The banner and the event stream

/**
 * @param {string} text
 * @param {"warn" | "bad"} tone
 */
function showBanner(text, tone) {
  banner.className = "banner " + tone;
  banner.textContent = text;
}

// clearBanner empties the banner; it stays in the page (empty, unseen) so that a screen reader
// announces what it says next.
function clearBanner() {
  banner.textContent = "";
  banner.className = "banner";
}

const stream = {
  /** @type {EventSource | null} */ source: null,
  /** @type {ReturnType<typeof setTimeout> | undefined} */ timer: undefined,
  backoff: 1000,
  down: false,
};

function startEvents() {
  if (stream.source || stream.timer !== undefined) return;
  openStream();
}

function openStream() {
  const es = new EventSource("/api/v1/events");
  stream.source = es;
  es.addEventListener("open", () => {
    stream.backoff = 1000;
    if (stream.down) {
      stream.down = false;
      clearBanner();
      refresh(); // what changed while the stream was down was not told
    }
  });
  es.addEventListener("change", refreshSoon);
  es.addEventListener("resync", refreshSoon);
  es.addEventListener("error", () => {
    es.close();
    if (stream.source === es) stream.source = null;
    disconnected();
  });
}

// disconnected says so and tries again, 1 s after the first failure, doubling up to 30 s.
function disconnected() {
  stream.down = true;
  showBanner("Disconnected — reconnecting…", "warn");
  const delay = stream.backoff;
  stream.backoff = Math.min(stream.backoff * 2, 30000);
  clearTimeout(stream.timer);
  stream.timer = setTimeout(reconnect, delay);
}

// reconnect asks whether the session still stands before it opens the stream again: an
// EventSource does not say that its answer was 401.
async function reconnect() {
  stream.timer = undefined;
  /** @type {Me} */
  let me;
  try {
    const res = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
    if (!res.ok) throw new Error(res.statusText);
    me = await res.json();
  } catch {
    disconnected();
    return;
  }
  if (!me.authenticated) {
    signedOut();
    return;
  }
  signedIn = true;
  openStream();
}

function stopEvents() {
  if (stream.source) stream.source.close();
  stream.source = null;
  clearTimeout(stream.timer);
  stream.timer = undefined;
  stream.down = false;
  stream.backoff = 1000;
}

/** signedIn is true once this page has been answered as someone: only then can a 401 mean
 * that the session ended. A first visit without a session is shown the sign-in form plainly. */
let signedIn = false;

// signedOut is where a 401 leads: the session ended (logout elsewhere, expiry, a restart), or
// there was none (a first visit), which is not news.
function signedOut() {
  stopEvents();
  if (signedIn) showBanner("Signed out — sign in again", "bad");
  else clearBanner();
  signedIn = false;
  whoami.textContent = "";
  if (location.hash !== "#/login") location.hash = "#/login";
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let refreshTimer;
// refreshSoon fetches the page again at most every 300 ms (or the page's refreshEvery), however
// many events arrive.
function refreshSoon() {
  if (refreshTimer !== undefined) return;
  refreshTimer = setTimeout(() => { refreshTimer = undefined; refresh(); }, current.page?.refreshEvery || 300);
}

// ---------------------------------------------------------------------------------------------
// Pages

/**
 * clusterCounts says how many of a Serving's clusters are healthy, and how many are held.
 * @param {Counts} c
 */
function clusterCounts(c) {
  return `${c.healthy || 0}/${c.selected || 0} healthy${c.held ? `, ${c.held} held` : ""}`;
}

/**
 * readyCell is a Ready condition as a table shows it: glyph, status and reason.
 * @param {Condition} r
 */
function readyCell(r) { return [badge(r.status), " ", r.reason || ""]; }

/** @type {Page} */
const servingsPage = {
  title: () => "Servings · Kokumi",
  // The Orders beside the Servings: an Order that never renders (SourceNotFound) has no
  // Serving, and its Ready condition says why.
  load: () => Promise.all([api("/servings"), api("/orders")]).then(([servings, orders]) => ({ servings, orders })),
  /** @param {{servings: List<ServingSummary>, orders: List<OrderSummary>}} d */
  view: ({ servings, orders }) => [
    h("h1", { tabindex: "-1" }, "Servings"),
    servings.items.length === 0 ? h("p", { class: "note", "data-key": "no-servings" }, "No Servings yet: create an Order.") :
      table([
        { label: "Namespace", cell: s => s.namespace },
        { label: "Name", cell: s => servingLink(s.namespace, s.name) },
        { label: "Clusters", cell: s => clusterCounts(s.clusters) },
        { label: "Ready", cell: s => readyCell(s.ready), title: s => s.ready.message || "" },
        { label: "Revision", cell: s => short(s.revision) },
      ], servings.items, s => `${s.namespace}/${s.name}`, { id: "servings" }),
    omitted(servings.omitted, "Servings"),
    h("section", { "data-key": "orders", "aria-labelledby": "orders-title" },
      h("h2", { class: "tabs", id: "orders-title" }, h("span", {}, "Orders")),
      orders.items.length === 0 ? h("p", { class: "note" }, "No Orders that you may list.") :
        table([
          { label: "Namespace", cell: o => o.namespace },
          { label: "Order", cell: o => o.name },
          { label: "Environment", cell: o => o.environment },
          { label: "Ready", cell: o => readyCell(o.ready) },
          { label: "Message", cell: o => o.ready.message || "", class: "msg" },
          { label: "Serving", cell: o => o.serving ? servingLink(o.namespace, o.serving) : h("span", { class: "note" }, "none yet") },
        ], orders.items, o => `${o.namespace}/${o.name}`, { id: "orders" }),
      omitted(orders.omitted, "Orders")),
  ],
};

/** The states the Serving page's filter offers, in the order the table lists them. */
const states = ["Held", "Degraded", "Drifted", "Progressing", "Healthy"];
const pageSize = 100;

/**
 * The Serving page's own state: the table's search, filter and page, the open panel (a
 * preview or a diff) and confirmation, and the last action's message. Events re-render the
 * page from it, so none of it is lost.
 * @typedef {object} ServingUI
 * @property {string} q
 * @property {string} state
 * @property {number} offset
 * @property {ReturnType<typeof setTimeout> | undefined} searchTimer
 * @property {{kind: "preview" | "diff", name: string, against?: string, data?: any, error?: string, opener: string} | null} panel
 * @property {{kind: "promote" | "rollback", name: string, against?: string, diff?: Diff, error?: string, plan?: PlanPreview, planError?: string, busy?: boolean, opener: string} | null} confirm
 * @property {{text: string, error?: boolean} | null} message
 * @property {{confirmAbort?: string, busy?: boolean, message?: {text: string, error?: boolean}}} rollout
 * @property {{busy?: boolean, message?: {text: string, error?: boolean}}} approve
 */

/** @type {Page} */
const servingPage = {
  title: (s, [, name]) => `${s ? s.name : name} · Serving · Kokumi`,
  /** @returns {ServingUI} */
  init: () => ({ q: "", state: "", offset: 0, searchTimer: undefined, panel: null, confirm: null, message: null, rollout: {}, approve: {} }),
  /**
   * @param {string[]} args
   * @param {ServingUI} ui
   */
  load: ([ns, name], ui) => {
    const q = new URLSearchParams();
    if (ui.q) q.set("q", ui.q);
    if (ui.state) q.set("state", ui.state);
    if (ui.offset) q.set("offset", String(ui.offset));
    q.set("limit", String(pageSize));
    // loadedAt is when the answer came, by this page's clock: a soak's countdown runs from it.
    return api(`/namespaces/${enc(ns)}/servings/${enc(name)}?${q}`).then((/** @type {ServingDetail} */ d) => ({ ...d, loadedAt: Date.now() }),
      // No such Serving: its Order (of the same name) says why, when it exists (an Order that
      // never rendered has no Serving).
      async e => {
        if (!(e instanceof APIError) || e.status !== 404) throw e;
        /** @type {OrderSummary} */
        let order;
        try { order = await api(`/namespaces/${enc(ns)}/orders/${enc(name)}`); } catch { throw e; }
        return /** @type {MissingServing} */ ({ missing: true, namespace: ns, name, order });
      });
  },
  /**
   * @param {ServingDetail | MissingServing} s
   * @param {string[]} args
   * @param {ServingUI} ui
   */
  view: (s, args, ui) => {
    if (s.missing) return missingServing(s);
    const c = s.clusters || {};
    return [
      h("h1", { tabindex: "-1" }, `Serving ${s.namespace}/${s.name}`),
      h("div", { class: "counts", "data-key": "counts" },
        ["selected", "healthy", "progressing", "degraded", "drifted", "held"].map(k =>
          h("div", { class: "count", "data-key": k }, h("b", {}, /** @type {any} */ (c)[k] || 0), " ", k))),
      h("p", { title: s.ready.message || "" }, "Ready: ", badge(s.ready.status), " ", s.ready.reason || "", s.ready.message ? ` — ${s.ready.message}` : ""),
      h("p", { class: "note", "data-key": "order" }, "Order ", s.order, s.preparation ? `, Preparation ${s.preparation}` : "",
        s.deployedSince ? h("span", { id: "deployed-since", title: "the soak of the stages after this Environment counts from here" },
          `; deployed on every cluster since ${new Date(s.deployedSince).toLocaleString()} (${since(s.deployedSince)})`) : ""),
      rolloutSection(s, ui),
      clustersSection(s, ui),
      pipelineSection(s),
      promotionSection(s, ui),
      recordsSection(s),
    ];
  },
};

/**
 * missingServing is the Serving page of a Serving that does not exist, whose Order does: the
 * Order's Ready condition says why it has none (SourceNotFound, RenderFailed…).
 * @param {MissingServing} m
 */
function missingServing(m) {
  const o = m.order;
  return [
    h("h1", { tabindex: "-1" }, `Serving ${m.namespace}/${m.name}`),
    h("p", { id: "serving-missing", "data-key": "missing" }, `No Serving yet: Order ${o.namespace}/${o.name} has not rendered a Preparation. The Order says: `,
      badge(o.ready.status), " ", o.ready.reason || "", o.ready.message ? ` — ${o.ready.message}` : ""),
    h("p", { class: "note", "data-key": "order-spec" }, `Product ${o.product}, Environment ${o.environment}, promotion ${o.mode}. The Serving appears once the Order renders; this page follows it.`),
  ];
}

/**
 * clustersSection is the table of the Serving's clusters, searched, filtered and paged by the
 * server (a fleet may have thousands).
 * @param {ServingDetail} s
 * @param {ServingUI} ui
 */
function clustersSection(s, ui) {
  const total = s.rowsTotal ?? s.rows.length + (s.rowsOmitted || 0);
  const first = s.rows.length ? ui.offset + 1 : 0;
  const last = ui.offset + s.rows.length;
  const filtered = ui.q || ui.state;
  return h("section", { "data-key": "clusters", "aria-label": "Clusters" },
    tab("Clusters"),
    h("div", { class: "filters", role: "search" },
      h("label", { class: "inline" }, "Search clusters",
        h("input", {
          type: "search", id: "cluster-search", name: "q", value: ui.q, placeholder: "cluster name", autocomplete: "off",
          oninput: (/** @type {Event} */ e) => {
            ui.q = /** @type {HTMLInputElement} */ (e.target).value;
            ui.offset = 0;
            clearTimeout(ui.searchTimer);
            ui.searchTimer = setTimeout(refresh, 250);
          },
        })),
      h("label", { class: "inline" }, "State",
        h("select", {
          id: "cluster-state", name: "state", value: ui.state,
          onchange: (/** @type {Event} */ e) => {
            ui.state = /** @type {HTMLSelectElement} */ (e.target).value;
            ui.offset = 0;
            refresh();
          },
        }, h("option", { value: "" }, "Any state"), states.map(st => h("option", { value: st }, st))))),
    s.rows.length === 0 ? h("p", { class: "note" }, filtered ? "No cluster matches." : "No cluster runs this Serving yet.") :
      table([
        { label: "Cluster", cell: r => h("a", { href: `#/clusters/${enc(r.cluster)}` }, r.cluster) },
        { label: "State", cell: r => [badge(r.state), r.reason && r.reason !== r.state ? ` (${r.reason})` : ""] },
        { label: "Health", cell: r => r.health ? badge(r.health) : "", title: () => "as Argo CD last reported it" },
        { label: "Sync", cell: r => r.sync ? badge(r.sync) : "" },
        { label: "Revision", cell: r => short(r.revision) },
        { label: "Since", cell: r => since(r.since), title: r => r.since || "" },
        { label: "Application", cell: r => r.application ? link(r.link, r.application) : "" },
        { label: "Message", cell: r => r.message || "", class: "msg" },
      ], s.rows, r => r.cluster, { id: "cluster-rows" }),
    h("nav", { class: "pager", "aria-label": "Cluster pages" },
      h("span", { class: "note", id: "cluster-range" }, total ? `Clusters ${first}–${last} of ${total}${filtered ? " matching" : ""}` : ""),
      h("button", {
        type: "button", class: "secondary", disabled: ui.offset === 0,
        onclick: () => { ui.offset = Math.max(0, ui.offset - pageSize); refresh(); },
      }, "Previous"),
      h("button", {
        type: "button", class: "secondary", disabled: last >= total,
        onclick: () => { ui.offset += pageSize; refresh(); },
      }, "Next")));
}

// rolloutSection shows the roll-out as the controller decided it (status.rollout): its state,
// who paused or aborted it, the current wave, why it halted or rolled back, and each wave's
// counts; and Pause, Resume and Abort, which write the Serving's spec.rollout as the person.
// Without a roll-out policy there are no waves, but a promoted Preparation that is not deployed
// everywhere yet can still be paused or aborted (it then rolls out as one wave, "all").
/**
 * @param {ServingDetail} s
 * @param {ServingUI} ui
 */
function rolloutSection(s, ui) {
  const r = s.rollout && s.rollout.preparation === s.preparation ? s.rollout : undefined;
  const control = s.control || {};
  const deployed = s.ready.status === "True" && s.ready.reason === "Deployed";
  const complete = r ? r.state === "Complete" : deployed;
  const aborted = !!s.preparation && (control.abort === s.preparation || (!!r && r.state === "Aborted"));
  const controls = !!s.preparation && (!complete || !!control.paused);
  if (!s.rollout && !controls) return "";
  const may = s.can && (s.can.rollout || s.can.promote);
  const denied = may && !may.allowed ? may.reason || "You may not change this roll-out." : "";
  const state = ui.rollout;
  const serving = `/namespaces/${enc(s.namespace)}/servings/${enc(s.name)}`;

  /**
   * act asks the server to pause, resume or abort, and says what happened; the page follows the
   * controller's answer in status through the event stream.
   * @param {"pause" | "resume" | "abort"} verb
   */
  async function act(verb) {
    if (state.busy) return;
    state.busy = true;
    paint();
    try {
      const a = await post(`${serving}/${verb}`, verb === "abort" ? { preparation: s.preparation } : {});
      const prep = a.preparation || s.preparation;
      state.message = { text: !a.changed ? `The roll-out of ${prep} is not paused: nothing changed.` :
        verb === "pause" ? `Paused the roll-out of ${prep}: no further cluster is changed until you resume it.` :
          verb === "resume" ? `Resumed the roll-out of ${prep}: the waves go on from where they stood.` :
            `Aborted the roll-out of ${prep}: the clusters it changed go back to what ran before.` };
      state.confirmAbort = undefined;
    } catch (e) {
      const fields = e instanceof APIError ? e.fields : [];
      state.message = { text: fields.length ? clip(fields.map(f => f.message).join("; ")) : errorText(e), error: true };
    }
    state.busy = false;
    paint();
    focusNow("#rollout-action-message");
    refresh();
  }
  function askAbort() {
    state.confirmAbort = s.preparation;
    state.message = undefined;
    paint();
    focusNow("#confirm-abort");
  }
  function cancelAbort() {
    if (state.busy) return;
    state.confirmAbort = undefined;
    paint();
    focusNow("#rollout-abort");
  }
  /**
   * @param {string} id
   * @param {string} label
   * @param {() => void} onclick
   * @param {string} [cls]
   */
  const button = (id, label, onclick, cls) => h("button", {
    type: "button", id, class: cls, disabled: !!denied || !!state.busy, "aria-describedby": denied ? "rollout-denied" : undefined, onclick,
  }, label);
  const who = r && r.by && (r.state === "Paused" || r.state === "Aborted") ? ` by ${r.by}` : "";
  const asked = !control.by ? "" :
    aborted && control.abort === s.preparation && (!r || r.state !== "Aborted") ? "Abort" :
      control.paused && !aborted && (!r || r.state !== "Paused") ? "Pause" :
        !control.paused && r && r.state === "Paused" ? "Resume" : "";
  // Without a roll-out policy the controller counts the clusters in one implicit wave ("all",
  // or "unselected" when only a gate asks): that is no wave to show.
  const oneWave = (/** @type {string} */ name) => name === "all" || name === "unselected";
  const inWaves = !!r && (r.waves || []).some(w => !oneWave(w.name));

  return h("section", { "data-key": "rollout", "aria-label": "Roll-out" },
    tab("Roll-out"),
    r ? h("p", { class: "note", id: "rollout-state" }, `Preparation ${r.preparation} rolls out${inWaves ? " in waves" : ""}: `, badge(r.state),
      who ? h("span", { id: "rollout-by" }, ` (${r.state.toLowerCase()}${who})`) : "",
      r.wave && inWaves ? ` — current wave ${r.wave}` : "",
      r.waveHealthySince ? `, healthy since ${new Date(r.waveHealthySince).toLocaleString()} (${since(r.waveHealthySince)})` : "",
      r.from ? `; the waves not reached yet run ${r.from}` : "",
      r.rollbackTo ? `; the changed clusters went back to ${r.rollbackTo}` : "", ".") :
      s.rollout ? h("p", { class: "note", id: "rollout-state" }, `The last roll-out was of Preparation ${s.rollout.preparation}: `, badge(s.rollout.state), ".") :
        h("p", { class: "note", id: "rollout-state" }, `Preparation ${s.preparation} rolls out to every cluster at once (the Environment has no roll-out policy); paused or aborted, it rolls out as one wave.`),
    // What was asked and not yet acted upon: the controller's status says what it did.
    asked ? h("p", { class: "note", id: "rollout-asked" }, `${asked} asked by ${control.by}; Kokumi acts on it shortly.`) : "",
    r && r.message ? h("p", { class: ["Halted", "RolledBack", "Aborted"].includes(r.state) ? "error" : "note", id: "rollout-message" }, r.message) : "",
    approvalPart(s, ui, serving),
    controls && denied ? h("p", { class: "note denied", id: "rollout-denied", "data-key": "denied" }, "Pause, Resume and Abort are disabled: ", denied) : "",
    controls ? h("p", { class: "buttons", "data-key": "rollout-buttons" },
      control.paused ? button("rollout-resume", "Resume", () => act("resume")) :
        !aborted ? button("rollout-pause", "Pause", () => act("pause"), "secondary") : "",
      !aborted ? button("rollout-abort", "Abort", askAbort, "secondary") : "") : "",
    state.confirmAbort && state.confirmAbort === s.preparation && !aborted ? h("div", {
      class: "confirm", role: "group", "aria-labelledby": "confirm-abort-title", "data-key": `confirm-abort-${s.preparation}`, id: "confirm-abort", tabindex: "-1",
      onkeydown: (/** @type {KeyboardEvent} */ e) => { if (e.key === "Escape") { e.preventDefault(); cancelAbort(); } },
    },
      h("h3", { id: "confirm-abort-title", "data-key": "title" }, `Abort the roll-out of ${s.preparation}?`),
      h("p", { class: "note", "data-key": "body" }, "Every cluster it changed goes back to the last Preparation with a deployment record in the Environment (or, without one, stays as it is), and no further cluster is changed while the Serving deploys ", s.preparation, "."),
      h("div", { class: "buttons", "data-key": "buttons" },
        h("button", { type: "button", id: "confirm-abort-yes", disabled: !!state.busy, onclick: () => act("abort") }, state.busy ? "Working…" : "Abort the roll-out"),
        h("button", { type: "button", id: "confirm-abort-cancel", class: "secondary", onclick: cancelAbort }, "Cancel"))) : "",
    state.message ? h("p", { class: state.message.error ? "error" : "note", role: "status", tabindex: "-1", "data-key": "rollout-message", id: "rollout-action-message" }, state.message.text) : "",
    inWaves && s.rollout && s.rollout.waves && s.rollout.waves.length ? table([
      { label: "Wave", cell: w => s.rollout && w.name === s.rollout.wave ? h("b", { "aria-current": "step" }, w.name) : w.name },
      { label: "Clusters", cell: w => String(w.selected) },
      { label: "Healthy", cell: w => String(w.healthy) },
      { label: "Progressing", cell: w => String(w.progressing) },
      { label: "Failed", cell: w => String(w.failed) },
      { label: "Waiting", cell: w => String(w.waiting) },
    ], s.rollout.waves, w => w.name) : "",
    verificationsTable(s.rollout));
}

// verificationsTable lists the verifications of the gates (status.rollout.verifications) as the
// controller tallied them: the gate, the kind, the result, the runs, when, and what the last run
// said (the HTTP answer's first lines, or the Job's container's last words), at most 512
// characters each and 72 rows.
/** @param {Rollout | undefined} r */
function verificationsTable(r) {
  const vs = (r && r.verifications) || [];
  if (!vs.length) return "";
  return h("div", { "data-key": "verifications", id: "verifications" },
    h("h4", {}, "Verifications"),
    table([
      { label: "Verification", cell: v => v.name },
      { label: "Gate", cell: v => v.wave ? `wave ${v.wave}` : "Environment" },
      { label: "Kind", cell: v => v.kind },
      { label: "Result", cell: v => badge(v.phase) },
      { label: "Runs", cell: v => `${v.passes || 0} passed in a row, ${v.failures || 0} failed, of ${v.runs || 0}` },
      { label: "When", cell: v => v.finished ? `${v.phase.toLowerCase()} ${since(v.finished)}` : v.started ? `last run ${since(v.started)}` : "not started" },
      { label: "Last output", cell: v => h("code", { class: "output" }, v.message || "") },
    ], vs, v => `${v.wave || ""}/${v.name}`));
}

// approvalPart shows the gate the roll-out waits at for approvals (status.rollout.awaiting),
// how many it asks and who approved so far (spec.approvals of the Preparation rolled out), and
// Approve, which adds the person's own approval; disabled, with the reason, for whoever may not
// approve (RBAC's verb approve) or may not approve this one (the promoter, when the gate asks
// for someone else; who approved already).
/**
 * @param {ServingDetail} s
 * @param {ServingUI} ui
 * @param {string} serving
 */
function approvalPart(s, ui, serving) {
  const a = s.approval;
  const state = ui.approve;
  const message = state.message ? h("p", { class: state.message.error ? "error" : "note", role: "status", tabindex: "-1", "data-key": "message", id: "approve-message" }, state.message.text) : "";
  // Once the gate passed, the approval is gone from the page, but what happened stays said.
  if (!a || a.preparation !== s.preparation) return message ? h("div", { "data-key": "approval", id: "approval" }, message) : "";
  const gate = a.wave ? `wave ${a.wave}` : "the Environment's gate";
  const can = (s.can && s.can.approve) || { allowed: false, reason: "You may not approve this roll-out." };
  async function approve() {
    if (state.busy || !a) return;
    state.busy = true;
    paint();
    try {
      const r = await post(`${serving}/approve`, { wave: a.wave || "", preparation: a.preparation });
      state.message = { text: `Approved ${gate} of ${r.preparation}: ${r.approvers.length} of ${r.required}; ${r.next}.` };
    } catch (e) {
      const fields = e instanceof APIError ? e.fields : [];
      state.message = { text: fields.length ? clip(fields.map(f => f.message).join("; ")) : errorText(e), error: true };
    }
    state.busy = false;
    paint();
    focusNow("#approve-message");
    refresh();
  }
  const count = `${a.approvers.length} of ${a.required}`;
  return h("div", { "data-key": "approval", id: "approval" },
    h("p", { class: "note", id: "approval-state", "data-key": "state" }, `The roll-out of ${a.preparation} awaits approval of ${gate}: `,
      h("b", {}, count), a.approvers.length ? ` (approved by ${a.approvers.join(", ")})` : "",
      a.separateFromPromoter && a.promotedBy ? `; ${a.promotedBy} promoted it, so someone else must approve` : "", "."),
    !can.allowed ? h("p", { class: "note denied", id: "approve-denied", "data-key": "denied" }, "Approve is disabled: ", can.reason || "") : "",
    h("p", { class: "buttons", "data-key": "buttons" }, h("button", {
      type: "button", id: "approve", disabled: !can.allowed || !!state.busy, "aria-describedby": can.allowed ? undefined : "approve-denied", onclick: approve,
    }, state.busy ? "Working…" : `Approve ${gate} (${count})`)),
    message);
}

// pipelineSection shows the stages the Order's Environment requires, for one Preparation:
// Passed, Soaking (with the time left) or Waiting, and why.
/** @param {ServingDetail} s */
function pipelineSection(s) {
  const p = s.pipeline;
  if (!p) return "";
  return h("section", { "data-key": "pipeline", "aria-label": "Pipeline" },
    tab("Pipeline"),
    h("p", { class: "note" }, `Environment ${p.environment} deploys a release only after these stages`,
      p.preparation ? `; checked for Preparation ${p.preparation}` : "", p.allowed ? ": every stage passed." : "."),
    p.error ? h("p", { class: "error" }, p.error) : "",
    p.stages.length === 0 ? (p.message ? h("p", { class: "error" }, p.message) : "") :
      table([
        { label: "Stage", cell: st => st.environment },
        { label: "State", cell: st => [badge(st.state), st.left ? ` (${soakLeft(st, s.loadedAt)} left)` : ""] },
        { label: "Soak", cell: st => st.soak || "" },
        { label: "Match", cell: st => st.match || "" },
        { label: "Serving", cell: st => st.serving ? servingLink(s.namespace, st.serving) : st.order || "" },
        { label: "Message", cell: st => st.message || "", class: "msg" },
      ], p.stages, st => st.environment),
    p.stages.length > 0 && !p.preparation && p.message ? h("p", { class: "note" }, p.message) : "");
}

// recordsSection lists the signed deployment records of the deployed Preparation, and how to
// verify them with cosign.
/** @param {ServingDetail} s */
function recordsSection(s) {
  const r = s.records;
  if (!r) return "";
  return h("section", { "data-key": "records", "aria-label": "Deployment records" },
    tab("Deployment records"),
    h("p", { class: "note" }, `Signed records attached to the artifact of Preparation ${r.preparation}, newest first.`),
    r.error ? h("p", { class: "error" }, "The records could not be read: ", r.error,
      r.items.length ? " (listed below from the Preparation's status, unverified)" : "") : "",
    r.items.length === 0 ? "" :
      table([
        { label: "Record", cell: x => short(x.digest) },
        { label: "Environment", cell: x => x.environment || "" },
        { label: "Clusters", cell: x => String(x.clusters) },
        { label: "Time", cell: x => since(x.time), title: x => x.time || "" },
        { label: "Key", cell: x => x.keyID ? h("code", {}, x.keyID) : "" },
        { label: "Verified", cell: x => r.error ? "—" : [badge(x.verified ? "yes" : "no"), x.problem ? ` (${x.problem})` : ""], class: "msg" },
      ], r.items, x => x.digest),
    omitted(r.itemsOmitted, "records"),
    h("p", { class: "note" }, "Verify them with stock cosign and Kokumi's ", h("a", { href: "#/public-key" }, "public key"), " saved as kokumi.pub:"),
    h("pre", {}, r.verify));
}

/**
 * deployedWhere says where and when a Preparation was deployed.
 * @param {PreparationSummary} x
 */
function deployedWhere(x) {
  const d = x.deployments || [];
  // What runs (the server's word, from status.running) and how the promoted one stands.
  return [
    x.label ? h("strong", { class: "runs" }, x.label) : "",
    d.length ? h("ul", { class: "history" }, d.map(e => h("li", { title: e.time },
      `${e.environment}: ${e.clusters} cluster${e.clusters === 1 ? "" : "s"}, ${since(e.time)}`))) :
      (x.label ? "" : h("span", { class: "note" }, "never deployed")),
  ];
}

// promotionSection lists the Order's Preparations with their history; each has a Preview and a
// Diff with what is deployed; in Manual mode, a Ready one that is not deployed a Promote button,
// and the Serving a Roll back button when there is something to go back to. Promote and Roll
// back ask first, showing the diff.
/**
 * @param {ServingDetail} s
 * @param {ServingUI} ui
 */
function promotionSection(s, ui) {
  const p = s.promotion;
  if (!p) return "";
  const manual = p.mode !== "Automatic";
  // Diffs compare with what the clusters run, not with a promoted Preparation that none runs yet.
  const deployed = p.current || "";
  const base = `/namespaces/${enc(s.namespace)}/preparations/`;

  /**
   * openPanel opens a preview or a diff, scrolled into view and focused (on a phone it opens
   * below the fold: a tap must show it); Close gives the focus back to the button that opened it.
   * @param {"preview" | "diff"} kind
   * @param {string} name
   */
  async function openPanel(kind, name) {
    /** @type {NonNullable<ServingUI["panel"]>} */
    const panel = { kind, name, against: kind === "diff" ? deployed : undefined, opener: rowButton(name, kind) };
    ui.panel = panel;
    paint();
    const el = document.getElementById("panel");
    if (el) {
      el.focus({ preventScroll: true });
      el.scrollIntoView({ block: "start" });
    }
    try {
      panel.data = await api(kind === "preview" ? `${base}${enc(name)}/manifests` : `${base}${enc(name)}/diff?against=${enc(deployed)}`);
    } catch (e) { panel.error = errorText(e); }
    if (ui.panel !== panel) return;
    paint();
    // Opened at the foot of the page, it could not scroll to its top while it was short: now
    // that it holds what it shows, once more, unless the person has moved on.
    const opened = document.getElementById("panel");
    if (opened && document.activeElement === opened) opened.scrollIntoView({ block: "start" });
  }
  /**
   * @param {"promote" | "rollback"} kind
   * @param {string} name
   */
  /**
   * ask opens the confirmation and moves the focus to it; its diff arrives inside it, which
   * keeps the focus. Cancel, Escape and Close give the focus back to the button that opened it.
   * @param {"promote" | "rollback"} kind
   * @param {string} name
   */
  async function ask(kind, name) {
    /** @type {NonNullable<ServingUI["confirm"]>} */
    const c = { kind, name, against: deployed || undefined, opener: kind === "rollback" ? "#rollback" : rowButton(name, "promote") };
    ui.confirm = c;
    ui.message = null;
    paint();
    focusNow("#confirm");
    const planned = confirmPlan(s, c, () => ui.confirm === c);
    if (!deployed) return planned;
    try { c.diff = await api(`${base}${enc(name)}/diff?against=${enc(deployed)}`); } catch (e) { c.error = errorText(e); }
    if (ui.confirm !== c) return;
    paint();
    if (!document.activeElement || document.activeElement === document.body) focusNow("#confirm");
  }
  function cancel() {
    const c = ui.confirm;
    if (!c || c.busy) return;
    ui.confirm = null;
    paint();
    focusNow(c.opener, "#preparations-title");
  }
  function closePanel() {
    const panel = ui.panel;
    if (!panel) return;
    ui.panel = null;
    paint();
    focusNow(panel.opener, "#preparations-title");
  }
  async function confirm() {
    const c = ui.confirm;
    if (!c || c.busy) return;
    c.busy = true;
    paint();
    const serving = `/namespaces/${enc(s.namespace)}/servings/${enc(s.name)}`;
    try {
      if (c.kind === "promote") {
        const r = await post(`${serving}/promotion`, { preparation: c.name });
        ui.message = { text: `${c.name} promoted: ${r.next || "the clusters roll it out"}.` };
      } else {
        const r = await post(`${serving}/rollback`, { to: c.name });
        ui.message = { text: `Rolled back to ${r.preparation || c.name}${r.from ? ` from ${r.from}` : ""}: ${r.next || "the clusters roll it out"}.` };
      }
      ui.confirm = null;
    } catch (e) {
      c.busy = false;
      // A refusal names its field for scripts ("preparation: …"): the page says the sentence.
      const fields = e instanceof APIError ? e.fields : [];
      ui.message = { text: fields.length ? clip(fields.map(f => f.message).join("; ")) : errorText(e), error: true };
    }
    paint();
    // The confirmation is gone (or its button was disabled while it worked): the focus goes to
    // what happened.
    focusNow("#promotion-message");
    refresh();
  }
  // Promote and Roll back patch the Serving: a person RBAC does not let do it sees them
  // disabled, and why (the server asked, SubjectAccessReview).
  const may = s.can && s.can.promote;
  const denied = may && !may.allowed ? may.reason || "You may not promote here." : "";
  const env = p.environment ? ` to ${p.environment}` : "";

  return h("section", { "data-key": "preparations", "aria-labelledby": "preparations-title" },
    h("h2", { class: "tabs", id: "preparations-title", tabindex: "-1" }, h("span", {}, "Preparations")),
    h("p", { class: "note" }, manual ?
      "Promotion is Manual: promote a Ready Preparation to deploy it." :
      "Promotion is Automatic: the newest Ready Preparation is deployed as soon as it is made."),
    manual && denied ? h("p", { class: "note denied", id: "promote-denied", "data-key": "denied" }, "Promote and Roll back are disabled: ", denied) : "",
    manual && p.rollbackTo ? h("p", { "data-key": "rollback" },
      h("button", {
        type: "button", id: "rollback", class: "secondary", disabled: !!denied, "aria-describedby": denied ? "promote-denied" : undefined,
        onclick: () => ask("rollback", /** @type {string} */ (p.rollbackTo)),
      }, `Roll back to ${p.rollbackTo}`)) : "",
    ui.confirm ? confirmation(ui.confirm, confirm, cancel) : "",
    ui.message ? h("p", { class: ui.message.error ? "error" : "note", role: "status", tabindex: "-1", "data-key": "message", id: "promotion-message" }, ui.message.text) : "",
    p.preparations.length === 0 ? h("p", { class: "note" }, "The Order has no Preparation yet.") :
      table([
        { label: "Preparation", cell: x => x.name },
        { label: "Created", cell: x => since(x.created), title: x => x.created },
        { label: "Digest", cell: x => short(x.digest) },
        { label: "Target namespace", cell: x => x.targetNamespace },
        { label: "Ready", cell: x => [badge(x.ready.status), " ", x.ready.reason || ""], title: x => x.ready.message || "" },
        { label: "Deployed", cell: deployedWhere },
        { label: "Custody", cell: x => x.custody || "", class: "msg" },
        {
          // Each button's name says its row: "Preview web-3", "Promote web-3 to edge".
          label: "Actions", class: "actions", cell: x => [
            h("button", { type: "button", class: "secondary", "data-action": "preview", "aria-label": `Preview ${x.name}`, onclick: () => openPanel("preview", x.name) }, "Preview"),
            deployed && x.name !== deployed ? h("button", {
              type: "button", class: "secondary", "data-action": "diff", "aria-label": `Diff ${x.name} with deployed ${deployed}`, onclick: () => openPanel("diff", x.name),
            }, "Diff with deployed") : "",
            !x.promoted && manual && x.ready.status === "True" ? promoteButton(x, env, denied, () => ask("promote", x.name)) : "",
          ],
        },
      ], p.preparations, x => x.name, { id: "preparations" }),
    omitted(p.preparationsOmitted, "Preparations"),
    ui.panel ? panelView(ui.panel, closePanel) : "");
}

/**
 * promoteButton is a row's Promote, disabled with the reason beside it when the server already
 * knows it would be refused: the person may not (denied, said once above the table), or the
 * stages of the Order's Environment do not let this Preparation through yet (x.blocked, as the
 * pipeline decided it).
 * @param {PreparationSummary} x
 * @param {string} env
 * @param {string} denied
 * @param {() => void} onclick
 */
function promoteButton(x, env, denied, onclick) {
  const why = `promote-why-${x.name}`;
  return [
    h("button", {
      type: "button", "data-action": "promote", "aria-label": `Promote ${x.name}${env}`, disabled: !!(denied || x.blocked),
      "aria-describedby": denied ? "promote-denied" : x.blocked ? why : undefined, onclick,
    }, "Promote"),
    !denied && x.blocked ? h("p", { class: "note blocked", id: why }, "Not yet: ", x.blocked) : "",
  ];
}

/**
 * rowButton is the selector of a Preparation's row's button.
 * @param {string} name
 * @param {string} action
 */
function rowButton(name, action) { return `#preparations tr[data-key="${CSS.escape(name)}"] button[data-action=${action}]`; }

/**
 * confirmation asks before a promotion or a rollback, showing what changes.
 * @param {NonNullable<ServingUI["confirm"]>} c
 * @param {() => void} yes
 * @param {() => void} no
 */
function confirmation(c, yes, no) {
  const verb = c.kind === "promote" ? `Promote ${c.name}` : `Roll back to ${c.name}`;
  // Keyed parts: the diff replaces "Comparing…" without touching the buttons (nor the focus).
  return h("div", {
    class: "confirm", role: "group", "aria-labelledby": "confirm-title", "data-key": `confirm-${c.kind}-${c.name}`, id: "confirm", tabindex: "-1",
    onkeydown: (/** @type {KeyboardEvent} */ e) => { if (e.key === "Escape") { e.preventDefault(); no(); } },
  },
    h("h3", { id: "confirm-title", "data-key": "title" }, `${verb}?`),
    planView(c),
    h("div", { "data-key": "body", "aria-busy": c.against && !c.error && !c.diff ? "true" : undefined },
      !c.against ? h("p", { class: "note" }, "Nothing is deployed yet: every object is new.") :
        c.error ? h("p", { class: "error" }, "The diff could not be read: ", c.error) :
          c.diff ? diffView(c.diff) : h("p", { class: "note" }, `Comparing with ${c.against}…`)),
    h("div", { class: "buttons", "data-key": "buttons" },
      h("button", { type: "button", id: "confirm-yes", disabled: !!c.busy, onclick: yes }, c.busy ? "Working…" : verb),
      h("button", { type: "button", id: "confirm-cancel", class: "secondary", onclick: no }, "Cancel")));
}

/**
 * confirmPlan reads the roll-out plan of the confirmation's Preparation (c.name) to the Serving's
 * Environment into it, and paints it there while the confirmation is still open (current): a
 * Preparation the clusters run already asks for no approval the roll-out goes past.
 * @param {ServingDetail} s
 * @param {NonNullable<ServingUI["confirm"]>} c
 * @param {() => boolean} current
 */
async function confirmPlan(s, c, current) {
  try {
    c.plan = await api(`/namespaces/${enc(s.namespace)}/servings/${enc(s.name)}/plan?preparation=${enc(c.name)}`);
  } catch (e) { c.planError = errorText(e); }
  if (current()) paint();
}

/**
 * planView is the roll-out plan in a confirmation: what the Environment's policy means now, in
 * sentences, and its waves (name, clusters, the first names, soak, how many at once).
 * @param {NonNullable<ServingUI["confirm"]>} c
 */
function planView(c) {
  const p = c.plan;
  return h("div", { class: "plan", id: "confirm-plan", "data-key": "plan", "aria-busy": !p && !c.planError ? "true" : undefined },
    h("h4", {}, p ? `Roll-out to ${p.environment}` : "Roll-out"),
    c.planError ? h("p", { class: "error" }, "The roll-out plan could not be read: ", c.planError) :
      !p ? h("p", { class: "note" }, "Reading the roll-out plan…") : [
        h("ul", { class: "plan-summary" }, p.summary.map(line => h("li", { "data-key": line }, line))),
        p.waves.length === 0 || (p.allAtOnce && p.clusters === 0) ? "" : table([
          { label: "Wave", cell: w => w.name },
          { label: "Clusters", cell: w => w.notReady ? `${w.clusters} (${w.notReady} not ready)` : String(w.clusters) },
          { label: "First clusters", cell: w => w.names.join(", ") + (w.moreNames ? ` and ${w.moreNames} more` : "") },
          { label: "Soak", cell: w => w.soak || "—" },
          { label: "At once", cell: w => String(w.maxUnavailable) },
        ], p.waves, w => w.name, { id: "plan-waves" }),
      ]);
}

/**
 * panelView shows a Preparation's manifests, or its diff with the deployed one.
 * @param {NonNullable<ServingUI["panel"]>} p
 * @param {() => void} close
 */
function panelView(p, close) {
  const title = p.kind === "preview" ? `Preview of ${p.name}` : `Diff of ${p.name} with deployed ${p.against}`;
  return h("section", {
    class: "panel", id: "panel", "aria-labelledby": "panel-title", "data-key": `panel-${p.kind}-${p.name}`, tabindex: "-1",
    onkeydown: (/** @type {KeyboardEvent} */ e) => { if (e.key === "Escape") { e.preventDefault(); close(); } },
  },
    h("div", { class: "panel-head", "data-key": "head" }, h("h3", { id: "panel-title" }, title),
      h("button", { type: "button", class: "secondary", id: "panel-close", "aria-label": `Close the ${p.kind === "preview" ? "preview" : "diff"} of ${p.name}`, onclick: close }, "Close")),
    h("div", { "data-key": "body", "aria-busy": !p.data && !p.error ? "true" : undefined },
      p.error ? h("p", { class: "error" }, p.error) :
        !p.data ? h("p", { class: "note" }, "Loading…") :
          p.kind === "preview" ? manifestsView(p.data) : diffView(p.data)));
}

/**
 * redactedView says which Secrets the server masked (their values read ++++++++): those of
 * the namespaces where the person may not get secrets.
 * @param {{redacted?: string[], redactedNote?: string}} r
 */
function redactedView(r) {
  const redacted = r.redacted || [];
  if (!redacted.length) return "";
  const note = r.redactedNote || `values of ${redacted.length} Secrets hidden`;
  return h("p", { class: "note redacted", "data-key": "redacted" },
    `${note.charAt(0).toUpperCase()}${note.slice(1)} (${redacted.join(", ")}).`);
}

/** The bidirectional control characters (embeddings, overrides, isolates) and their names. */
/** @type {Record<string, string>} */
const bidiNames = {
  "\u202A": "LEFT-TO-RIGHT EMBEDDING", "\u202B": "RIGHT-TO-LEFT EMBEDDING", "\u202C": "POP DIRECTIONAL FORMATTING",
  "\u202D": "LEFT-TO-RIGHT OVERRIDE", "\u202E": "RIGHT-TO-LEFT OVERRIDE", "\u2066": "LEFT-TO-RIGHT ISOLATE",
  "\u2067": "RIGHT-TO-LEFT ISOLATE", "\u2068": "FIRST STRONG ISOLATE", "\u2069": "POP DIRECTIONAL ISOLATE",
};
const bidiSplit = /([\u202A-\u202E\u2066-\u2069])/;

/**
 * bidi shows text with each bidirectional control character marked (⟨U+202E⟩) instead of
 * obeyed, as code hosts do: such a character can make a value read otherwise than it is.
 * @param {string | undefined} text
 * @returns {Child}
 */
function bidi(text) {
  if (!text || !bidiSplit.test(text)) return text || "";
  return text.split(bidiSplit).map((part, i) => {
    if (i % 2 === 0) return part;
    const code = part.charCodeAt(0).toString(16).toUpperCase();
    return h("span", { class: "bidi", title: `U+${code} ${bidiNames[part]}` }, `⟨U+${code}⟩`);
  });
}

/**
 * bidiWarning says, above a preview or a diff, that it holds bidirectional control
 * characters, and how they are shown.
 * @param {(string | undefined)[]} texts
 */
function bidiWarning(texts) {
  const n = texts.reduce((sum, t) => sum + (t ? t.split(bidiSplit).length - 1 : 0) / 2, 0);
  if (!n) return "";
  return h("p", { class: "bidi-warning", role: "note", "data-key": "bidi" },
    `⚠ ${n === 1 ? "One bidirectional Unicode control character" : `${n} bidirectional Unicode control characters`}: `,
    "text may read otherwise than it is. Each is marked ", h("span", { class: "bidi" }, "⟨U+…⟩"), " where it stands; review those values.");
}

/** @param {Manifests} m */
function manifestsView(m) {
  const images = m.images || [], objects = m.objects || [];
  return [
    h("p", { class: "note" }, "Digest ", short(m.digest), `: ${objects.length + (m.objectsOmitted || 0)} objects.`),
    bidiWarning([...objects.flatMap(o => [o.yaml, o.name, o.namespace]), ...images.flatMap(i => [i.original, i.pinned])]),
    redactedView(m),
    images.length ? table([
      { label: "Image", cell: i => h("code", {}, bidi(i.original)) },
      { label: "Pinned", cell: i => h("code", {}, bidi(i.pinned)) },
    ], images, i => i.original) : "",
    objects.map(o => h("details", { class: "object", "data-key": objectKey(o) },
      h("summary", {}, bidi(`${o.kind} ${o.namespace ? o.namespace + "/" : ""}${o.name}`)),
      h("pre", {}, bidi(o.yaml)))),
    omitted(m.objectsOmitted, "objects"),
  ];
}

/** @param {{kind: string, namespace?: string, name: string}} o */
function objectKey(o) { return `${o.kind}/${o.namespace || ""}/${o.name}`; }

/** @param {Diff} d */
function diffView(d) {
  const fields = d.fields || [], images = d.images || [], objects = d.objects || [];
  if (!fields.length && !images.length && !objects.length) return [h("p", { class: "note" }, `${d.to} renders the same as ${d.from}.`), redactedView(d)];
  return h("div", { class: "diff" },
    h("p", { class: "note" }, `From ${d.from} to ${d.to}:`),
    bidiWarning([...fields.flatMap(f => [f.from, f.to]), ...images.flatMap(i => [i.image, i.from, i.to]), ...objects.flatMap(o => [o.diff, o.name, o.namespace])]),
    redactedView(d),
    fields.length ? table([
      { label: "Field", cell: f => f.field },
      { label: "From", cell: f => h("code", {}, bidi(f.from)) },
      { label: "To", cell: f => h("code", {}, bidi(f.to)) },
    ], fields, f => f.field) : "",
    images.length ? table([
      { label: "Image", cell: i => h("code", {}, bidi(i.image)) },
      { label: "Change", cell: i => i.change },
      { label: "From", cell: i => h("code", {}, bidi(i.from)) },
      { label: "To", cell: i => h("code", {}, bidi(i.to)) },
    ], images, i => i.image) : "",
    objects.map(o => h("details", { class: "object", open: true, "data-key": objectKey(o) },
      h("summary", {}, h("span", { class: `change ${o.change}` }, o.change), " ", bidi(`${o.kind} ${o.namespace ? o.namespace + "/" : ""}${o.name}`)),
      o.diff ? h("pre", { class: "diff-text" }, o.diff.split("\n").map(line =>
        h("span", { class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "" }, bidi(line), "\n"))) : "")),
    omitted(d.objectsOmitted, "objects"));
}

/** The states of the fleet view, most in need of a look first, as the server counts them. */
const fleetStates = ["Held", "Degraded", "Drifted", "Waiting", "Progressing", "Healthy"];
const fleetPageSize = 50;

/**
 * The Fleet page's own state: its filters, the cursor of the page it shows and those of the
 * pages before it, and the Orders the Order filter offers (those of the last answer without one).
 * @typedef {object} FleetUI
 * @property {string} selector
 * @property {string} order
 * @property {string} state
 * @property {string} after
 * @property {string[]} before
 * @property {string[]} orders
 * @property {ReturnType<typeof setTimeout> | undefined} selectorTimer
 */

/** @param {FleetColumn} c */
const fleetColumnKey = c => `${c.namespace}/${c.order}`;

/**
 * fleetCell is what a cluster runs of an Order, as the Fleet page shows it: the state (glyph
 * and word), the release and its age; a release that is not the Serving's says so.
 * @param {FleetCell | null} c
 */
function fleetCell(c) {
  if (!c) return h("span", { class: "note", title: "this Order's Environment does not select the cluster" }, "—");
  return [badge(c.state), c.reason && c.reason !== c.state ? ` (${c.reason})` : "",
    c.preparation ? h("div", { class: "release" }, h("code", {}, c.preparation), c.target ? "" : h("span", { class: "note" }, " not the Serving's"),
      c.created ? h("span", { class: "note", title: c.created }, ` · made ${since(c.created)}`) : "") : ""];
}

/**
 * pageFleet shows the page the Fleet page's cursor names; when that turns off the pager's
 * button that was pressed (the first or last page), the focus moves to the other one rather
 * than drop to the page's top.
 * @param {string} pressed
 * @param {string} other
 */
async function pageFleet(pressed, other) {
  await refresh();
  const button = /** @type {HTMLButtonElement | null} */ (document.getElementById(pressed));
  if (button && button.disabled) document.getElementById(other)?.focus();
}

/**
 * The Fleet page: for an Environment (args: namespace and name) or every one the person may
 * read (no args), its clusters by the Orders deployed there, filtered and paged by the server.
 * @type {Page}
 */
const fleetPage = {
  // Every answer decides every cell of the fleet (the counts need them all): a busy fleet's
  // events fetch it again at most every 2 s.
  refreshEvery: 2000,
  title: (_, args) => args.length ? `${args[1]} · Fleet · Kokumi` : "Fleet · Kokumi",
  /** @returns {FleetUI} */
  init: () => ({ selector: "", order: "", state: "", after: "", before: [], orders: [], selectorTimer: undefined }),
  /**
   * @param {string[]} args
   * @param {FleetUI} ui
   */
  load: (args, ui) => {
    const q = new URLSearchParams();
    if (ui.selector) q.set("selector", ui.selector);
    if (ui.order) q.set("order", ui.order);
    if (ui.state) q.set("state", ui.state);
    if (ui.after) q.set("after", ui.after);
    q.set("limit", String(fleetPageSize));
    const path = args.length ? `/namespaces/${enc(args[0])}/environments/${enc(args[1])}/fleet` : "/fleet";
    return api(`${path}?${q}`).then((/** @type {FleetView} */ f) => {
      if (!ui.order) ui.orders = f.columns.map(fleetColumnKey);
      return f;
    });
  },
  /**
   * @param {FleetView} f
   * @param {string[]} args
   * @param {FleetUI} ui
   */
  view: (f, args, ui) => {
    const several = f.environments.length > 1 || !args.length;
    const first = f.rows.length ? ui.before.length * fleetPageSize + 1 : 0;
    const last = ui.before.length * fleetPageSize + f.rows.length;
    const filtered = ui.selector || ui.order || ui.state;
    const again = () => { ui.after = ""; ui.before = []; refresh(); };
    /** @type {Column<FleetRow>[]} */
    const columns = [{ label: "Cluster", cell: r => [h("a", { href: `#/clusters/${enc(r.cluster)}` }, r.cluster), r.ready ? "" : h("span", { class: "note" }, " (not Ready)")] }];
    f.columns.forEach((c, i) => columns.push({
      label: several ? `${c.namespace}/${c.order}` : c.order,
      cell: r => fleetCell(r.cells[i]),
      title: r => { const x = r.cells[i]; return x ? [x.state, x.reason, x.message].filter(Boolean).join(": ") : ""; },
    }));
    return [
      h("h1", { tabindex: "-1" }, args.length ? `Fleet of ${args[0]}/${args[1]}` : "Fleet"),
      h("p", { class: "note", "data-key": "environments" }, f.environments.length === 0 ? "No Environment that you may read." :
        ["Environments: ", f.environments.map((e, i) => [i ? ", " : "", h("a", { href: `#/fleet/${e.split("/").map(enc).join("/")}` }, e)])]),
      h("div", { class: "counts", "data-key": "counts", id: "fleet-counts" },
        fleetStates.map(st => h("div", { class: "count", "data-key": st }, h("b", {}, f.counts[st] || 0), " ", st))),
      h("div", { class: "filters", role: "search", "data-key": "filters" },
        h("label", { class: "inline" }, "Labels",
          h("input", {
            type: "search", id: "fleet-selector", name: "selector", value: ui.selector, placeholder: "region=eu,tier!=canary", autocomplete: "off",
            oninput: (/** @type {Event} */ e) => {
              ui.selector = /** @type {HTMLInputElement} */ (e.target).value;
              clearTimeout(ui.selectorTimer);
              ui.selectorTimer = setTimeout(again, 300);
            },
          })),
        h("label", { class: "inline" }, "Order",
          h("select", {
            id: "fleet-order", name: "order", value: ui.order,
            onchange: (/** @type {Event} */ e) => { ui.order = /** @type {HTMLSelectElement} */ (e.target).value; again(); },
          }, h("option", { value: "" }, "Every Order"), ui.orders.map(o => h("option", { value: o }, o)))),
        h("label", { class: "inline" }, "State",
          h("select", {
            id: "fleet-state", name: "state", value: ui.state,
            onchange: (/** @type {Event} */ e) => { ui.state = /** @type {HTMLSelectElement} */ (e.target).value; again(); },
          }, h("option", { value: "" }, "Any state"), fleetStates.map(st => h("option", { value: st }, `${st} (${f.counts[st] || 0})`))))),
      f.columns.length === 0 ? h("p", { class: "note", "data-key": "no-orders" }, "No Order deploys to these Environments yet.") :
        f.rows.length === 0 ? h("p", { class: "note", "data-key": "no-rows" }, filtered ? "No cluster matches." : "These Environments select no cluster.") :
          table(columns, f.rows, r => r.cluster, { id: "fleet-rows", "data-key": `rows-${f.columns.map(fleetColumnKey).join(",")}` }),
      h("nav", { class: "pager", "aria-label": "Fleet pages", "data-key": "pager" },
        h("span", { class: "note", id: "fleet-range" }, f.rowsTotal ? `Clusters ${first}–${last} of ${f.rowsTotal}${filtered ? " matching" : ""}` : ""),
        h("button", {
          type: "button", class: "secondary", id: "fleet-previous", disabled: ui.before.length === 0,
          onclick: () => { ui.after = ui.before.pop() || ""; pageFleet("fleet-previous", "fleet-next"); },
        }, "Previous"),
        h("button", {
          type: "button", class: "secondary", id: "fleet-next", disabled: !f.next,
          onclick: () => { ui.before.push(ui.after); ui.after = f.next || ""; pageFleet("fleet-next", "fleet-previous"); },
        }, "Next")),
    ];
  },
};

/** @type {Page} */
const clustersPage = {
  title: () => "Clusters · Kokumi",
  load: () => api("/clusters"),
  /** @param {List<ClusterSummary>} list */
  view: list => [
    h("h1", { tabindex: "-1" }, "Clusters"),
    table([
      { label: "Name", cell: c => h("a", { href: `#/clusters/${enc(c.name)}` }, c.name) },
      { label: "Server", cell: c => h("code", {}, c.server) },
      { label: "Version", cell: c => c.version || "" },
      { label: "Ready", cell: c => [badge(c.ready.status), " ", c.ready.reason || ""], title: c => c.ready.message || "" },
      { label: "Labels", cell: c => Object.entries(c.labels || {}).map(([k, v]) => `${k}=${v}`).join(", "), class: "msg" },
    ], list.items, c => c.name),
    omitted(list.omitted, "Clusters"),
  ],
};

/** @type {Page} */
const clusterPage = {
  title: (c, [name]) => `${c ? c.name : name} · Cluster · Kokumi`,
  load: ([name]) => api(`/clusters/${enc(name)}`),
  /** @param {ClusterDetail} c */
  view: c => [
    h("h1", { tabindex: "-1" }, `Cluster ${c.name}`),
    h("p", {}, h("code", {}, c.server), c.version ? ` · ${c.version}` : "", " · Ready: ", badge(c.ready.status), " ", c.ready.reason || ""),
    c.ready.message ? h("p", { class: "note" }, c.ready.message) : "",
    tab("Deployments"),
    c.deployments.length === 0 ? h("p", { class: "note" }, "Nothing Kokumi deploys runs here.") :
      table([
        { label: "Serving", cell: d => servingLink(d.namespace, d.serving), title: d => `${d.namespace}/${d.serving}` },
        { label: "Namespace", cell: d => d.namespace },
        { label: "State", cell: d => d.state ? [badge(d.state), d.reason && d.reason !== d.state ? ` (${d.reason})` : ""] : "" },
        { label: "Health", cell: d => d.health ? badge(d.health) : "", title: () => "as Argo CD last reported it" },
        { label: "Sync", cell: d => d.sync ? badge(d.sync) : "" },
        { label: "Revision", cell: d => short(d.revision) },
        { label: "Since", cell: d => since(d.since), title: d => d.since || "" },
        { label: "Application", cell: d => d.application ? link(d.link, d.application) : "" },
        { label: "Message", cell: d => d.message || "", class: "msg" },
      ], c.deployments, d => `${d.namespace}/${d.serving}`, { id: "deployments" }),
    omitted(c.deploymentsOmitted, "Deployments"),
  ],
};

/**
 * field is a labelled control with the place its error goes, tied to it with
 * aria-describedby when there is one.
 * @param {string} label
 * @param {HTMLElement} control
 * @param {...Child} extra
 */
function field(label, control, ...extra) {
  const id = control.id;
  return h("div", { class: "field" },
    h("label", { for: id }, label), control, ...extra,
    h("p", { class: "field-error", id: `${id}-error`, hidden: true }));
}

/** @param {unknown} e */
function errorText(e) { return clip(e instanceof Error ? e.message : String(e)); }

/**
 * clip shortens the overlong words of a message (an error quoting a 10,000-character value)
 * so that it stays readable; the rest of the message is kept.
 * @param {string} text
 */
function clip(text) {
  return text.replace(/\S{81,}/g, w => `${w.slice(0, 60)}… (${w.length.toLocaleString("en")} characters)`);
}

/**
 * focusNow focuses the first element that one of selectors names (the page is painted
 * synchronously); one that is not focusable by itself gets tabindex -1.
 * @param {...string} selectors
 */
function focusNow(...selectors) {
  for (const sel of selectors) {
    const el = /** @type {HTMLElement | null} */ (document.querySelector(sel));
    if (!el || (el instanceof HTMLButtonElement && el.disabled)) continue;
    if (el.tabIndex < 0 && !el.hasAttribute("tabindex")) el.setAttribute("tabindex", "-1");
    el.focus();
    return;
  }
}

/** maxOrderName is the longest name an Order may have: the rule of the Order's CRD (api/v1alpha1,
 * MaxOrderNameLength), which the server checks too. */
const maxOrderName = 53;

/** @type {Page} */
const orderPage = {
  title: () => "New Order · Kokumi",
  mount: async () => {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    // The namespace: the one the link names, else the first where the person may create an
    // Order (the server asks RBAC), else empty for them to type.
    const ns = /** @type {HTMLInputElement} */ (h("input", { id: "f-namespace", name: "namespace", required: true, list: "f-namespaces", autocomplete: "off", value: params.get("namespace") || "" }));
    const namespaces = h("datalist", { id: "f-namespaces" });
    const name = /** @type {HTMLInputElement} */ (h("input", {
      id: "f-name", name: "name", required: true, placeholder: "new-order-name", "aria-describedby": "f-name-hint",
      oninput: () => checkName(),
    }));
    const nameHint = h("p", { class: "note", id: "f-name-hint" }, `lowercase letters, digits and '-', at most ${maxOrderName} characters`);
    const submit = /** @type {HTMLButtonElement} */ (h("button", { type: "submit" }, "Create Order"));
    const denied = h("p", { class: "note denied", id: "order-denied", hidden: true });
    const product = /** @type {HTMLSelectElement} */ (h("select", { id: "f-product", name: "product" }));
    const environment = /** @type {HTMLSelectElement} */ (h("select", { id: "f-environment", name: "environment" }));
    const requires = h("span", { class: "note", id: "f-environment-requires" });
    /** @type {EnvironmentSummary[]} */
    let environments = [];
    // showRequires names the stages the chosen Environment requires before it deploys a release.
    function showRequires() {
      const e = environments.find(x => x.name === environment.value);
      // What a release waits for before it deploys there: the stages, and the approval gate.
      const parts = [];
      if (e && e.requires && e.requires.length) parts.push("requires " + e.requires.map(r => r.soak ? `${r.environment} (soak ${r.soak})` : r.environment).join(", "));
      if (e && e.approvals) parts.push(`asks ${e.approvals} approval${e.approvals === 1 ? "" : "s"} (by people bound to kokumi-approver) before a release deploys`);
      requires.textContent = parts.join("; ");
    }
    environment.addEventListener("change", showRequires);
    const target = /** @type {HTMLInputElement} */ (h("input", { id: "f-targetNamespace", name: "targetNamespace", placeholder: "the Product's, or the Order's namespace" }));
    const promotion = /** @type {HTMLSelectElement} */ (h("select", { id: "f-promotion", name: "promotion" }, h("option", {}, "Manual"), h("option", {}, "Automatic")));
    const message = h("p", { class: "note", id: "order-message", role: "status" });
    /** @type {Record<string, HTMLInputElement | HTMLSelectElement>} */
    const controls = { namespace: ns, name, product, environment, targetNamespace: target, promotion };

    function clearErrors() {
      for (const c of Object.values(controls)) clearError(c);
    }
    /** @param {HTMLInputElement | HTMLSelectElement} c */
    function clearError(c) {
      c.removeAttribute("aria-invalid");
      if (c === name) c.setAttribute("aria-describedby", "f-name-hint");
      else c.removeAttribute("aria-describedby");
      const err = byId(`${c.id}-error`);
      err.hidden = true;
      err.textContent = "";
    }
    // checkName says, as it is typed, that a name is longer than an Order's may be (the
    // Order's own rule, which the server checks too); it reports whether the name may go.
    function checkName() {
      clearError(name);
      if (name.value.length <= maxOrderName) return true;
      showErrors([{ field: "name", message: `${name.value.length.toLocaleString("en")} characters: an Order's name is at most ${maxOrderName}` }]);
      return false;
    }
    /**
     * showErrors puts each field's error beside it; those of no field go in the message.
     * @param {FieldError[]} fields
     * @returns {FieldError[]} the errors of no field on the form
     */
    function showErrors(fields) {
      /** @type {FieldError[]} */
      const rest = [];
      for (const f of fields) {
        const c = controls[f.field];
        if (!c) { rest.push(f); continue; }
        const err = byId(`${c.id}-error`);
        const text = clip(f.message);
        err.textContent = err.textContent ? `${err.textContent} ${text}` : text;
        err.hidden = false;
        c.setAttribute("aria-invalid", "true");
        c.setAttribute("aria-describedby", err.id);
      }
      return rest;
    }
    async function fill() {
      message.textContent = "";
      if (!ns.value) {
        environment.replaceChildren();
        product.replaceChildren();
        message.textContent = "Type the namespace of the Order.";
        return;
      }
      try {
        const [envs, products] = await Promise.all([
          api(`/namespaces/${enc(ns.value)}/environments`),
          api(`/namespaces/${enc(ns.value)}/products`)]);
        environments = envs.items;
        environment.replaceChildren(...environments.map(e => h("option", { value: e.name },
          e.readyClusters === undefined ? `${e.name} (${e.clusters} clusters)` :
            `${e.name} (${e.readyClusters} of ${e.clusters} cluster${e.clusters === 1 ? "" : "s"} Ready)`)));
        if (environments.length === 1) environment.value = environments[0].name;
        showRequires();
        product.replaceChildren(.../** @type {ProductSummary[]} */ (products.items).map(p => h("option", { value: p.name }, p.name)));
        if (environments.length === 0) message.textContent = "This namespace has no Environment: an admin creates one.";
        // The server asked RBAC whether the person may create an Order here: if not, the
        // button is disabled, and says why.
        /** @type {Can | undefined} */
        const can = envs.can && envs.can.createOrder;
        const no = can && !can.allowed;
        submit.disabled = !!no;
        denied.hidden = !no;
        denied.textContent = no ? `You may not create Orders in ${ns.value}: ${can.reason || ""}` : "";
        if (no) submit.setAttribute("aria-describedby", "order-denied");
        else submit.removeAttribute("aria-describedby");
      } catch (e) { message.className = "error"; message.textContent = errorText(e); }
    }
    ns.addEventListener("change", fill);
    // The namespaces where the person may create an Order: offered as they type, and the first
    // is the default when the link names none.
    const offered = api("/order-namespaces").then((/** @type {List<string>} */ l) => {
      namespaces.replaceChildren(...l.items.map(n => h("option", { value: n })));
      if (!ns.value && l.items.length) ns.value = l.items[0];
    }).catch(() => undefined);
    const form = h("form", {
      id: "order-form", novalidate: true,
      onsubmit: async (/** @type {Event} */ ev) => {
        ev.preventDefault();
        clearErrors();
        message.className = "note";
        message.textContent = "Creating…";
        try {
          const o = await post(`/namespaces/${enc(ns.value)}/orders`,
            { name: name.value, product: product.value, environment: environment.value, targetNamespace: target.value, promotion: promotion.value });
          // A link to where it goes on: the Serving's page (it shows the Order until it renders).
          message.replaceChildren(`Order ${o.namespace}/${o.name} created: follow it on `,
            h("a", { id: "order-created", href: `#/servings/${enc(o.namespace)}/${enc(o.name)}` }, `its Serving ${o.name}`),
            " (it appears once the Order renders).");
        } catch (e) {
          message.className = "error";
          const fields = e instanceof APIError ? e.fields : [];
          const rest = showErrors(fields);
          // The fields are above this message, which ends the form.
          message.textContent = fields.length > rest.length ?
            `The Order was not created: fix the ${fields.length - rest.length === 1 ? "field" : "fields"} marked above.${rest.map(f => ` ${f.field}: ${clip(f.message)}`).join("")}` :
            errorText(e);
          const first = fields.map(f => controls[f.field]).find(Boolean);
          if (first) first.focus();
        }
      },
    },
    field("Namespace", ns, namespaces), field("Name", name, nameHint), field("Product", product),
    field("Environment", environment, requires), field("Target namespace", target),
    field("Promotion", promotion), submit, denied, message);
    view.replaceChildren(h("h1", { tabindex: "-1" }, "New Order"), form);
    await offered;
    await fill();
  },
};

/** @type {Page} */
const publicKeyPage = {
  title: () => "Public key · Kokumi",
  load: () => api("/public-keys"),
  /** @param {PublicKeys} k */
  view: k => [
    h("h1", { tabindex: "-1" }, "Public key"),
    h("p", { class: "note" }, "Kokumi signs a deployment record each time a Serving deploys a Preparation, and attaches it to the Preparation's artifact. Anyone verifies them with stock cosign and this key."),
    k.current ? [h("p", {}, "Current key ", k.currentID ? h("code", {}, k.currentID) : ""), h("pre", {}, k.current)] :
      h("p", { class: "note" }, "No key yet: Kokumi creates it when the controller first starts."),
    h("p", {}, "Save it as kokumi.pub (or run ", h("code", {}, "kokumi public-key > kokumi.pub"),
      "), then verify the records of an artifact; the Serving page shows the command for what it deploys:"),
    h("pre", {}, k.verify),
    k.keys.length > 1 ? [
      tab("Every trusted key"),
      h("p", { class: "note" }, "Records signed with a previous key stay trusted while it is listed: kokumi public-key --all prints them."),
      table([
        { label: "Key ID", cell: x => h("code", {}, x.id) },
        { label: "", cell: x => x.id === k.currentID ? "current" : "" },
        { label: "PEM", cell: x => h("pre", {}, x.pem) },
      ], k.keys, x => x.id),
    ] : "",
  ],
};

/** @type {Page} */
const loginPage = {
  title: () => "Log in · Kokumi",
  public: true,
  mount: () => {
    stopEvents();
    logoutButton.hidden = true;
    whoami.textContent = "";
    const token = h("input", { id: "token", type: "password", autocomplete: "current-password", required: true });
    const message = h("p", { class: "error", role: "alert" });
    view.replaceChildren(h("h1", { tabindex: "-1" }, "Log in"), h("form", {
      onsubmit: async (/** @type {Event} */ ev) => {
        ev.preventDefault();
        try {
          await post("/login", { token: /** @type {HTMLInputElement} */ (token).value });
          clearBanner();
          location.hash = "#/";
        } catch (e) { message.textContent = errorText(e); }
      },
    }, field("Token", token), h("button", { type: "submit" }, "Log in"), message,
    h("p", { class: "note" }, "Sign in with your Kubernetes token (kubectl create token <serviceaccount>, or your OIDC id-token): you see and order what RBAC lets you. kokumi dev prints an admin token too.")));
  },
};

// showWho names the signed-in person beside Log out: what they see is what RBAC lets them.
async function showWho() {
  if (whoami.textContent) return;
  /** @type {Me} */
  const me = await api("/me").catch(() => ({ authenticated: false }));
  whoami.textContent = !me.authenticated ? "" : me.admin ? "admin token" : me.user || "";
}

/** @type {[RegExp, Page][]} */
const routes = [
  [/^#\/login$/, loginPage],
  [/^#\/?$/, servingsPage],
  [/^#\/servings\/([^/?]+)\/([^/?]+)$/, servingPage],
  [/^#\/fleet$/, fleetPage],
  [/^#\/fleet\/([^/?]+)\/([^/?]+)$/, fleetPage],
  [/^#\/clusters$/, clustersPage],
  [/^#\/clusters\/([^/?]+)$/, clusterPage],
  [/^#\/order(?:\?.*)?$/, orderPage],
  [/^#\/public-key$/, publicKeyPage],
];

/**
 * What the view shows: the page, its arguments, its own state and the data last fetched.
 * @type {{key: string, page: Page | null, args: string[], ui: any, data: any, error: string, errorStatus: number, seq: number, focusHeading: boolean}}
 */
const current = { key: "", page: null, args: [], ui: {}, data: null, error: "", errorStatus: 0, seq: 0, focusHeading: false };

/**
 * route shows the page the hash names. On a route change (moved, not loaded: moved is true) the
 * focus goes to the new page's heading once it is painted, as a screen reader expects of a new
 * page; a first load leaves it at the top, where the skip link is.
 * @param {boolean} [moved]
 */
async function route(moved) {
  const hash = location.hash || "#/";
  const found = routes.map(([re, page]) => /** @type {const} */ ([hash.match(re), page])).find(([m]) => m);
  if (!found) {
    current.page = null;
    current.key = hash;
    document.title = "Kokumi";
    view.replaceChildren(h("p", { class: "error" }, "No such page."));
    return;
  }
  const [m, page] = found;
  const args = /** @type {RegExpMatchArray} */ (m).slice(1).filter(x => x !== undefined).map(decodeURIComponent);
  const key = hash.split("?")[0];
  const fresh = key !== current.key || page !== current.page;
  current.key = key;
  current.page = page;
  current.args = args;
  if (fresh) {
    current.ui = page.init ? page.init() : {};
    current.data = null;
    current.error = "";
    current.focusHeading = moved === true;
  }
  document.title = page.title(null, args);
  if (!page.public) {
    logoutButton.hidden = false;
    startEvents();
    showWho();
  }
  if (page.mount) {
    current.seq++;
    try { await page.mount(args); } catch (e) { if (location.hash !== "#/login") view.replaceChildren(h("p", { class: "error" }, errorText(e))); }
    focusHeading();
    return;
  }
  if (fresh) view.replaceChildren(h("p", { class: "note" }, "Loading…"));
  await refresh();
}

// refresh fetches what the page shows again and patches it in.
async function refresh() {
  const page = current.page;
  if (!page || !page.load) return;
  const seq = ++current.seq;
  try {
    const data = await page.load(current.args, current.ui);
    if (seq !== current.seq || page !== current.page) return;
    current.data = data;
    current.error = "";
    current.errorStatus = 0;
  } catch (e) {
    if (seq !== current.seq || page !== current.page) return;
    if (e instanceof APIError && e.status === 401) return; // signedOut took over
    current.error = errorText(e);
    current.errorStatus = e instanceof APIError ? e.status : 0;
  }
  paint();
}

// paint builds the page from its data and state, and patches the view to match.
function paint() {
  const page = current.page;
  if (!page || !page.view) return;
  if (current.data) document.title = page.title(current.data, current.args);
  /** @type {Child} */
  let nodes = current.data ? page.view(current.data, current.args, current.ui) : "";
  if (current.error) {
    const err = h("p", { class: "error", "data-key": "load-error" }, current.error);
    // A page that could not be read at all still says what it is, and leads back.
    nodes = current.data ? [err, nodes] : [
      h("h1", { tabindex: "-1", "data-key": "load-error-title" }, current.errorStatus === 403 ? "You may not see this page" : "This page could not be read"),
      err,
      h("p", { "data-key": "load-error-back" }, h("a", { href: "#/", id: "back-to-servings" }, "Back to the Servings")),
    ];
  }
  paintInto(view, nodes);
  if (current.data || current.error) focusHeading();
}

// focusHeading moves the focus to the page's heading once after a route change, unless the
// person has put it somewhere in the page meanwhile.
function focusHeading() {
  if (!current.focusHeading) return;
  current.focusHeading = false;
  const active = document.activeElement;
  if (active && active !== document.body && view.contains(active)) return;
  const h1 = /** @type {HTMLElement | null} */ (view.querySelector("h1"));
  if (h1) h1.focus();
}

logoutButton.addEventListener("click", async () => {
  stopEvents();
  signedIn = false;
  await fetch("/api/v1/logout", { method: "POST", headers: { "Content-Type": "application/json" } }).catch(() => undefined);
  clearBanner();
  location.hash = "#/login";
});
window.addEventListener("hashchange", () => route(true));
// The skip link moves the focus to the page itself: its href cannot be a fragment, which
// routes here.
byId("skip").addEventListener("click", e => {
  e.preventDefault();
  const h1 = /** @type {HTMLElement | null} */ (view.querySelector("h1"));
  (h1 || view).focus();
});
route();

// Time moves on a quiet fleet too: the page is painted again from what it holds ("… ago", a
// soak's countdown), every second while a countdown runs, else every 5 seconds; nothing is
// fetched.
let ticks = 0;
setInterval(() => {
  ticks++;
  if (document.visibilityState !== "visible" || !current.data) return;
  const counting = /** @type {ServingDetail} */ (current.data).pipeline?.stages?.some(st => st.leftSeconds !== undefined);
  if (counting || ticks % 5 === 0) paint();
}, 1000);
