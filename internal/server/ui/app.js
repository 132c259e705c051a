// Kokumi's UI: plain JavaScript, no build step. Hash routes, JSON from /api/v1, and
// server-sent events that say what changed so the page it shows is fetched again.
"use strict";

const view = document.getElementById("view");
const logoutButton = document.getElementById("logout");
const whoami = document.getElementById("whoami");
let events = null;
let refreshTimer = null;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, options) {
  const res = await fetch("/api/v1" + path, Object.assign({ credentials: "same-origin" }, options));
  if (res.status === 401) {
    location.hash = "#/login";
    throw new Error("log in first");
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.error || res.statusText);
    err.fields = body.fields || [];
    throw err;
  }
  return body;
}

function since(t) {
  if (!t) return "";
  const s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 90) return s + "s ago";
  if (s < 5400) return Math.round(s / 60) + "m ago";
  if (s < 129600) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

function status(text) { return h("span", { class: text || "Unknown" }, text || "—"); }
function short(rev) { return rev ? h("code", { title: rev }, rev.replace(/^sha256:/, "").slice(0, 12)) : ""; }
function omitted(n, what) { return n ? h("p", { class: "note" }, `${n} more ${what} not shown.`) : ""; }
function link(href, text) { return href ? h("a", { href, target: "_blank", rel: "noopener" }, text) : text; }

function render(...nodes) { view.replaceChildren(...nodes.flat()); }

async function servingsPage() {
  const list = await api("/servings");
  render(
    h("h1", {}, "Servings"),
    list.items.length === 0 ? h("p", { class: "note" }, "No Servings yet: create an Order.") :
    h("table", {},
      h("tr", {}, h("th", {}, "Namespace"), h("th", {}, "Name"), h("th", {}, "Clusters"), h("th", {}, "Ready"), h("th", {}, "Revision")),
      list.items.map(s => h("tr", {},
        h("td", {}, s.namespace),
        h("td", {}, h("a", { href: `#/servings/${s.namespace}/${s.name}` }, s.name)),
        h("td", {}, `${s.clusters.healthy || 0}/${s.clusters.selected || 0} healthy`),
        h("td", { title: s.ready.message || "" }, status(s.ready.status), " ", s.ready.reason || ""),
        h("td", {}, short(s.revision))))),
    omitted(list.omitted, "Servings"));
}

async function servingPage(ns, name) {
  const s = await api(`/namespaces/${encodeURIComponent(ns)}/servings/${encodeURIComponent(name)}`);
  const c = s.clusters || {};
  render(
    h("h1", {}, `Serving ${s.namespace}/${s.name}`),
    h("div", { class: "counts" },
      ["selected", "healthy", "progressing", "degraded", "held"].map(k =>
        h("div", { class: "count" }, h("b", {}, c[k] || 0), k))),
    h("p", { title: s.ready.message || "" }, "Ready: ", status(s.ready.status), " ", s.ready.reason || "", s.ready.message ? ` — ${s.ready.message}` : ""),
    h("p", { class: "note" }, "Order ", s.order, s.preparation ? `, Preparation ${s.preparation}` : ""),
    s.rows.length === 0 ? h("p", { class: "note" }, "No cluster runs this Serving yet.") :
    h("table", {},
      h("tr", {}, h("th", {}, "Cluster"), h("th", {}, "State"), h("th", {}, "Health"), h("th", {}, "Sync"), h("th", {}, "Revision"), h("th", {}, "Since"), h("th", {}, "Application"), h("th", {}, "Message")),
      s.rows.map(r => h("tr", {},
        h("td", {}, h("a", { href: `#/clusters/${r.cluster}` }, r.cluster)),
        h("td", {}, status(r.state), r.reason && r.reason !== r.state ? ` (${r.reason})` : ""),
        h("td", { title: "as Argo CD last reported it" }, r.health ? status(r.health) : ""),
        h("td", {}, r.sync ? status(r.sync) : ""),
        h("td", {}, short(r.revision)),
        h("td", { title: r.since || "" }, since(r.since)),
        h("td", {}, r.application ? link(r.link, r.application) : ""),
        h("td", { class: "msg" }, r.message || "")))),
    omitted(s.rowsOmitted, "clusters"),
    pipelineSection(s),
    promotionSection(s),
    recordsSection(s));
}

function tab(title) { return h("div", { class: "tabs" }, h("span", {}, title)); }
function servingLink(ns, name) { return h("a", { href: `#/servings/${ns}/${name}` }, name); }

// pipelineSection shows the stages the Order's Environment requires, for one Preparation:
// Passed, Soaking (with the time left) or Waiting, and why.
function pipelineSection(s) {
  const p = s.pipeline;
  if (!p) return "";
  return [
    tab("Pipeline"),
    h("p", { class: "note" }, `Environment ${p.environment} deploys a release only after these stages`,
      p.preparation ? `; checked for Preparation ${p.preparation}` : "", p.allowed ? ": every stage passed." : "."),
    p.error ? h("p", { class: "error" }, p.error) : "",
    p.stages.length === 0 ? (p.message ? h("p", { class: "error" }, p.message) : "") :
    h("table", {},
      h("tr", {}, h("th", {}, "Stage"), h("th", {}, "State"), h("th", {}, "Soak"), h("th", {}, "Serving"), h("th", {}, "Message")),
      p.stages.map(st => h("tr", {},
        h("td", {}, st.environment),
        h("td", {}, status(st.state), st.left ? ` (${st.left} left)` : ""),
        h("td", {}, st.soak || ""),
        h("td", {}, st.serving ? servingLink(s.namespace, st.serving) : st.order || ""),
        h("td", { class: "msg" }, st.message || "")))),
    p.stages.length > 0 && !p.preparation && p.message ? h("p", { class: "note" }, p.message) : "",
  ];
}

// recordsSection lists the signed deployment records of the deployed Preparation, and how to
// verify them with cosign.
function recordsSection(s) {
  const r = s.records;
  if (!r) return "";
  return [
    tab("Deployment records"),
    h("p", { class: "note" }, `Signed records attached to the artifact of Preparation ${r.preparation}, newest first.`),
    r.error ? h("p", { class: "error" }, "The records could not be read: ", r.error,
      r.items.length ? " (listed below from the Preparation's status, unverified)" : "") : "",
    r.items.length === 0 ? "" :
    h("table", {},
      h("tr", {}, h("th", {}, "Record"), h("th", {}, "Environment"), h("th", {}, "Clusters"), h("th", {}, "Time"), h("th", {}, "Key"), h("th", {}, "Verified")),
      r.items.map(x => h("tr", {},
        h("td", {}, short(x.digest)),
        h("td", {}, x.environment || ""),
        h("td", {}, String(x.clusters)),
        h("td", { title: x.time || "" }, since(x.time)),
        h("td", {}, x.keyID ? h("code", {}, x.keyID) : ""),
        h("td", { class: "msg" }, r.error ? "—" : h("span", { class: x.verified ? "True" : "False" }, x.verified ? "yes" : "no"),
          x.problem ? ` (${x.problem})` : "")))),
    omitted(r.itemsOmitted, "records"),
    h("p", { class: "note" }, "Verify them with stock cosign and Kokumi's ", h("a", { href: "#/public-key" }, "public key"), " saved as kokumi.pub:"),
    h("pre", {}, r.verify),
  ];
}

// promotionSection lists the Order's Preparations; in Manual mode, each Ready one that is not
// deployed has a Promote button.
function promotionSection(s) {
  const p = s.promotion;
  if (!p) return "";
  const manual = p.mode !== "Automatic";
  const message = h("p", { class: "note" });
  async function promote(name) {
    message.className = "note";
    message.textContent = `Promoting ${name}…`;
    try {
      await api(`/namespaces/${encodeURIComponent(s.namespace)}/servings/${encodeURIComponent(s.name)}/promotion`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ preparation: name }),
      });
      message.textContent = `${name} promoted: the clusters roll it out.`;
    } catch (e) { message.className = "error"; message.textContent = e.message; }
  }
  return [
    h("div", { class: "tabs" }, h("span", {}, "Preparations")),
    h("p", { class: "note" }, manual ?
      "Promotion is Manual: promote a Ready Preparation to deploy it." :
      "Promotion is Automatic: the newest Ready Preparation is deployed as soon as it is made."),
    p.preparations.length === 0 ? h("p", { class: "note" }, "The Order has no Preparation yet.") :
    h("table", {},
      h("tr", {}, h("th", {}, "Preparation"), h("th", {}, "Created"), h("th", {}, "Digest"), h("th", {}, "Target namespace"), h("th", {}, "Ready"), h("th", {}, "")),
      p.preparations.map(x => h("tr", {},
        h("td", {}, x.name),
        h("td", { title: x.created }, since(x.created)),
        h("td", {}, short(x.digest)),
        h("td", {}, x.targetNamespace),
        h("td", { title: x.ready.message || "" }, status(x.ready.status), " ", x.ready.reason || ""),
        h("td", {}, x.promoted ? "deployed" :
          manual && x.ready.status === "True" ? h("button", { type: "button", onclick: () => promote(x.name) }, "Promote") : "")))),
    omitted(p.preparationsOmitted, "Preparations"),
    message,
  ];
}

async function clustersPage() {
  const list = await api("/clusters");
  render(
    h("h1", {}, "Clusters"),
    h("table", {},
      h("tr", {}, h("th", {}, "Name"), h("th", {}, "Server"), h("th", {}, "Version"), h("th", {}, "Ready"), h("th", {}, "Labels")),
      list.items.map(c => h("tr", {},
        h("td", {}, h("a", { href: `#/clusters/${c.name}` }, c.name)),
        h("td", {}, h("code", {}, c.server)),
        h("td", {}, c.version || ""),
        h("td", { title: c.ready.message || "" }, status(c.ready.status), " ", c.ready.reason || ""),
        h("td", {}, Object.entries(c.labels || {}).map(([k, v]) => `${k}=${v}`).join(", "))))),
    omitted(list.omitted, "Clusters"));
}

async function clusterPage(name) {
  const c = await api(`/clusters/${encodeURIComponent(name)}`);
  render(
    h("h1", {}, `Cluster ${c.name}`),
    h("p", {}, h("code", {}, c.server), c.version ? ` · ${c.version}` : "", " · Ready: ", status(c.ready.status), " ", c.ready.reason || ""),
    c.ready.message ? h("p", { class: "note" }, c.ready.message) : "",
    h("div", { class: "tabs" }, h("span", {}, "Deployments")),
    c.deployments.length === 0 ? h("p", { class: "note" }, "Nothing Kokumi deploys runs here.") :
    h("table", {},
      h("tr", {}, h("th", {}, "Serving"), h("th", {}, "Health"), h("th", {}, "Sync"), h("th", {}, "Revision"), h("th", {}, "Since"), h("th", {}, "Application")),
      c.deployments.map(d => h("tr", {},
        h("td", {}, h("a", { href: `#/servings/${d.namespace}/${d.serving}` }, `${d.namespace}/${d.serving}`)),
        h("td", {}, status(d.health)),
        h("td", {}, status(d.sync)),
        h("td", {}, short(d.revision)),
        h("td", { title: d.since || "" }, since(d.since)),
        h("td", {}, link(d.link, d.application))))),
    omitted(c.deploymentsOmitted, "Deployments"));
}

async function orderPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const ns = h("input", { name: "namespace", required: true, value: params.get("namespace") || "platform" });
  const name = h("input", { name: "name", required: true, placeholder: "podinfo-edge" });
  const product = h("select", { name: "product" });
  const environment = h("select", { name: "environment" });
  const requires = h("span", { class: "note" });
  let environments = [];
  // showRequires names the stages the chosen Environment requires before it deploys a release.
  function showRequires() {
    const e = environments.find(x => x.name === environment.value);
    requires.textContent = e && e.requires && e.requires.length ?
      "requires " + e.requires.map(r => r.soak ? `${r.environment} (soak ${r.soak})` : r.environment).join(", ") : "";
  }
  environment.addEventListener("change", showRequires);
  const target = h("input", { name: "targetNamespace", placeholder: "the Product's, or the Order's namespace" });
  const promotion = h("select", { name: "promotion" }, h("option", {}, "Manual"), h("option", {}, "Automatic"));
  const message = h("p", { class: "note" });
  async function fill() {
    message.textContent = "";
    try {
      const [envs, products] = await Promise.all([
        api(`/namespaces/${encodeURIComponent(ns.value)}/environments`),
        api(`/namespaces/${encodeURIComponent(ns.value)}/products`)]);
      environments = envs.items;
      environment.replaceChildren(...envs.items.map(e => h("option", { value: e.name }, `${e.name} (${e.clusters} clusters)`)));
      if (envs.items.length === 1) environment.value = envs.items[0].name;
      showRequires();
      product.replaceChildren(...products.items.map(p => h("option", { value: p.name }, p.name)));
      if (envs.items.length === 0) message.textContent = "This namespace has no Environment: an admin creates one.";
    } catch (e) { message.textContent = e.message; }
  }
  ns.addEventListener("change", fill);
  const form = h("form", {
    onsubmit: async ev => {
      ev.preventDefault();
      message.className = "note";
      message.textContent = "Creating…";
      try {
        const o = await api(`/namespaces/${encodeURIComponent(ns.value)}/orders`, {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ name: name.value, product: product.value, environment: environment.value, targetNamespace: target.value, promotion: promotion.value }),
        });
        message.textContent = `Order ${o.namespace}/${o.name} created; its Serving appears once it renders.`;
      } catch (e) { message.className = "error"; message.textContent = e.message; }
    },
  },
    h("label", {}, "Namespace", ns), h("label", {}, "Name", name), h("label", {}, "Product", product),
    h("label", {}, "Environment", environment, requires), h("label", {}, "Target namespace", target),
    h("label", {}, "Promotion", promotion), h("button", { type: "submit" }, "Create Order"), message);
  render(h("h1", {}, "New Order"), form);
  await fill();
}

// publicKeyPage shows the key that verifies deployment records, and the cosign command.
async function publicKeyPage() {
  const k = await api("/public-keys");
  render(
    h("h1", {}, "Public key"),
    h("p", { class: "note" }, "Kokumi signs a deployment record each time a Serving deploys a Preparation, and attaches it to the Preparation's artifact. Anyone verifies them with stock cosign and this key."),
    k.current ? [h("p", {}, "Current key ", k.currentID ? h("code", {}, k.currentID) : ""), h("pre", {}, k.current)] :
      h("p", { class: "note" }, "No key yet: Kokumi creates it when the controller first starts."),
    h("p", {}, "Save it as kokumi.pub (or run ", h("code", {}, "kokumi public-key > kokumi.pub"),
      "), then verify the records of an artifact; the Serving page shows the command for what it deploys:"),
    h("pre", {}, k.verify),
    k.keys.length > 1 ? [
      tab("Every trusted key"),
      h("p", { class: "note" }, "Records signed with a previous key stay trusted while it is listed: kokumi public-key --all prints them."),
      h("table", {},
        h("tr", {}, h("th", {}, "Key ID"), h("th", {}, ""), h("th", {}, "PEM")),
        k.keys.map(x => h("tr", {},
          h("td", {}, h("code", {}, x.id)),
          h("td", {}, x.id === k.currentID ? "current" : ""),
          h("td", {}, h("pre", {}, x.pem))))),
    ] : "");
}

// showWho names the signed-in person beside Log out: what they see is what RBAC lets them.
async function showWho() {
  if (whoami.textContent) return;
  const me = await api("/me").catch(() => ({}));
  whoami.textContent = !me.authenticated ? "" : me.admin ? "admin token" : me.user;
}

function loginPage() {
  stopEvents();
  logoutButton.hidden = true;
  whoami.textContent = "";
  const token = h("input", { type: "password", autocomplete: "current-password", required: true });
  const message = h("p", { class: "error" });
  render(h("h1", {}, "Log in"), h("form", {
    onsubmit: async ev => {
      ev.preventDefault();
      try {
        await api("/login", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token: token.value }) });
        location.hash = "#/";
      } catch (e) { message.textContent = e.message; }
    },
  }, h("label", {}, "Token", token), h("button", { type: "submit" }, "Log in"), message,
    h("p", { class: "note" }, "Sign in with your Kubernetes token (kubectl create token <serviceaccount>, or your OIDC id-token): you see and order what RBAC lets you. kokumi dev prints an admin token too.")));
}

const routes = [
  [/^#\/login$/, loginPage],
  [/^#\/?$/, servingsPage],
  [/^#\/servings\/([^/]+)\/([^/]+)$/, servingPage],
  [/^#\/clusters$/, clustersPage],
  [/^#\/clusters\/([^/]+)$/, clusterPage],
  [/^#\/order(\?.*)?$/, orderPage],
  [/^#\/public-key$/, publicKeyPage],
];

async function route() {
  const hash = location.hash || "#/";
  for (const [re, page] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    try {
      await page(...m.slice(1).filter(x => x !== undefined && !x.startsWith("?")).map(decodeURIComponent));
      if (page !== loginPage) { logoutButton.hidden = false; startEvents(); showWho(); }
    } catch (e) {
      if (location.hash !== "#/login") render(h("p", { class: "error" }, e.message));
    }
    return;
  }
  render(h("p", { class: "error" }, "No such page."));
}

// The order form is not refreshed by events: it would lose what is being typed.
function refreshSoon() {
  if (/^#\/(order|login)/.test(location.hash)) return;
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(route, 300);
}

function startEvents() {
  if (events) return;
  events = new EventSource("/api/v1/events");
  events.addEventListener("change", refreshSoon);
  events.addEventListener("resync", refreshSoon);
}

function stopEvents() {
  if (events) events.close();
  events = null;
}

logoutButton.addEventListener("click", async () => {
  await fetch("/api/v1/logout", { method: "POST", headers: { "Content-Type": "application/json" } });
  location.hash = "#/login";
});
window.addEventListener("hashchange", route);
route();
