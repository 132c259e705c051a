// The browser scenarios of Kokumi's UI, run one at a time by the Go tests of this folder
// (browser_test.go), which start the server and say where it is:
//
//   KOKUMI_BASE=http://127.0.0.1:port KOKUMI_TOKEN=… KOKUMI_CONTROL=http://127.0.0.1:port \
//   KOKUMI_SCREENSHOTS=dir node scenarios.mjs <scenario>
//
// Headless Debian Chromium (/usr/bin/chromium) through playwright-core: no browser download.
// Exits 0 when the scenario passes; otherwise prints what failed and exits 1.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { request as httpRequest } from "node:http";

const base = must("KOKUMI_BASE");
const token = must("KOKUMI_TOKEN");
const viewerToken = must("KOKUMI_VIEWER_TOKEN");
const control = must("KOKUMI_CONTROL");
const shots = process.env.KOKUMI_SCREENSHOTS || "screenshots";
const executablePath = process.env.KOKUMI_CHROMIUM || "/usr/bin/chromium";
mkdirSync(shots, { recursive: true });

/** @param {string} name */
function must(name) {
  const v = process.env[name];
  if (!v) { console.error(`${name} is not set: run these scenarios with go test ./test/browser`); process.exit(2); }
  return v;
}

/**
 * @param {unknown} cond
 * @param {string} what
 */
function check(cond, what) {
  if (!cond) throw new Error(what);
  console.log(`ok: ${what}`);
}

/** @param {string} action */
async function act(action) {
  const res = await fetch(`${control}/${action}`, { method: "POST" });
  if (!res.ok) throw new Error(`control ${action}: ${res.status} ${await res.text()}`);
}

/**
 * @param {import("playwright-core").Page} page
 * @param {string} name
 */
async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

/**
 * @param {import("playwright-core").Page} page
 * @param {string} [as] the token to sign in with: the admin's unless given
 */
async function login(page, as) {
  await page.goto(`${base}/#/login`);
  await page.fill("#token", as || token);
  await page.click("button[type=submit]");
  await page.waitForSelector("h1:text('Servings')");
}

/** @param {import("playwright-core").Page} page */
async function noSidewaysScroll(page) {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
}

/** @param {import("playwright-core").Page} page */
async function bannerText(page) {
  return (await page.textContent("#banner")) || "";
}

const servingURL = `${base}/#/servings/team-web/web`;

/**
 * focused describes the element that has the focus: its id, tag, aria-label and whether it is
 * inside the element sel names.
 * @param {import("playwright-core").Page} page
 * @param {string} [inside]
 */
async function focused(page, inside) {
  return page.evaluate(sel => {
    const a = document.activeElement;
    return {
      id: a?.id || "", tag: a?.tagName || "", label: a?.getAttribute("aria-label") || "", text: (a?.textContent || "").slice(0, 60),
      inside: !!(sel && a && a.closest(sel)), body: a === document.body,
    };
  }, inside);
}

/**
 * get answers a GET of the server with the Host header given, as Node sends it (a browser
 * cannot): its status and headers.
 * @param {string} path
 * @param {string} host
 * @returns {Promise<{status: number, headers: import("node:http").IncomingHttpHeaders}>}
 */
function getWithHost(path, host) {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { headers: { Host: host } }, res => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode || 0, headers: res.headers }));
    });
    req.on("error", reject);
    req.end();
  });
}

const web3 = "#preparations tr[data-key='web-3']";

/** @type {Record<string, (page: import("playwright-core").Page) => Promise<void>>} */
const scenarios = {
  async login(page) {
    await page.goto(base + "/");
    await page.waitForSelector("#token");
    await page.fill("#token", "not-the-token");
    await page.click("button[type=submit]");
    await page.waitForSelector("[role=alert]:not(:empty)");
    check((await page.textContent("[role=alert]"))?.length, "a wrong token is refused with a message");
    await shot(page, "login");
    await page.fill("#token", token);
    await page.click("button[type=submit]");
    await page.waitForSelector("a:text('web')");
    check(await page.title() === "Servings · Kokumi", `the title names the page (${await page.title()})`);
    check(await page.isVisible("#logout"), "Log out is offered");
    await page.waitForSelector("#whoami:text('admin token')");
    await shot(page, "servings");
  },

  async serving(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector("#cluster-rows tr[data-key='edge-3']");
    check(await page.title() === "web · Serving · Kokumi", `the title names the Serving (${await page.title()})`);
    const order = await page.$$eval("#cluster-rows tbody tr", rows => rows.map(r => r.getAttribute("data-key")));
    check(order.join(",") === "edge-3,edge-2,edge-1", `held, degraded, then healthy clusters (${order})`);
    const held = await page.textContent("#cluster-rows tr[data-key='edge-3'] td[data-label='State']");
    check(held?.includes("⊘") && held.includes("Held") && held.includes("ClusterNotReady"), `the held state has its glyph, word and reason (${held})`);
    const degraded = await page.textContent("#cluster-rows tr[data-key='edge-2'] td[data-label='State']");
    check(degraded?.includes("✕") && degraded.includes("Degraded"), `degraded has a glyph of its own (${degraded})`);
    const healthy = await page.textContent("#cluster-rows tr[data-key='edge-1'] td[data-label='State']");
    check(healthy?.includes("✓") && healthy.includes("Healthy"), `healthy has a glyph of its own (${healthy})`);
    check(await page.$("main[aria-live]") === null, "the page is not one aria-live region");
    check(await page.getAttribute("#banner", "aria-live") === "polite", "the banner is announced politely");
    const counts = await page.$$eval(".count", cs => cs.map(c => c.textContent));
    check(counts.length === 6 && counts[0]?.includes("3") && counts[0].includes("selected"), `the counts are shown (${counts})`);
    const history = await page.textContent("#preparations tr[data-key='web-1'] td[data-label='Deployed']");
    check(history?.includes("edge") && history.includes("3 clusters"), `a Preparation says where and when it ran (${history})`);
    await shot(page, "serving");
  },

  async "live-update"(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector("#cluster-rows tr[data-key='edge-1']");
    // Open a confirmation and type into the search box: an event must keep both.
    await page.click("#preparations tr[data-key='web-3'] button[data-action=promote]");
    await page.waitForSelector("#confirm");
    await page.click("#cluster-search");
    await page.keyboard.type("edge");
    await page.waitForTimeout(600); // the search is sent, and answered
    await page.evaluate(() => { /** @type {any} */ (window).heldRow = document.querySelector("#cluster-rows tr[data-key='edge-3']"); });
    await act("degrade-edge-1");
    await page.waitForFunction(() => document.querySelector("#cluster-rows tr[data-key='edge-1'] td[data-label='State']")?.textContent?.includes("Degraded"), null, { timeout: 15000 });
    check(true, "edge-1's row turned Degraded without a reload");
    const count = await page.textContent(".count[data-key='degraded'] b");
    check(count === "2", `the degraded count followed (${count})`);
    check(await page.evaluate(() => document.activeElement?.id) === "cluster-search", "the search box kept the focus");
    check(await page.inputValue("#cluster-search") === "edge", "what was typed is still there");
    check(await page.isVisible("#confirm"), "the open Promote confirmation survived the event");
    check(await page.evaluate(() => /** @type {any} */ (window).heldRow === document.querySelector("#cluster-rows tr[data-key='edge-3']")), "the unchanged rows are the same elements (patched, not re-rendered)");
    await shot(page, "live-update");
    await page.click("#confirm-cancel");
    await act("heal-edge-1");
    await page.waitForFunction(() => document.querySelector("#cluster-rows tr[data-key='edge-1'] td[data-label='State']")?.textContent?.includes("Healthy"), null, { timeout: 15000 });
  },

  async reconnect(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector("#cluster-rows tr[data-key='edge-1']");
    await page.waitForTimeout(500); // the event stream is open
    check(await bannerText(page) === "", "no banner while connected");
    await act("stop-server");
    try {
      await page.waitForFunction(() => document.getElementById("banner")?.textContent === "Disconnected — reconnecting…", null, { timeout: 10000 });
      check(true, "the banner says the page is disconnected");
      await shot(page, "disconnected");
      // What changes while the page is disconnected shows once it is back.
      await act("degrade-edge-1");
      await page.waitForTimeout(1500);
    } finally {
      await act("start-server");
    }
    await page.waitForFunction(() => document.getElementById("banner")?.textContent === "", null, { timeout: 40000 });
    check(true, "the banner clears once the server is back");
    await page.waitForFunction(() => document.querySelector("#cluster-rows tr[data-key='edge-1'] td[data-label='State']")?.textContent?.includes("Degraded"), null, { timeout: 10000 });
    check(true, "the page fetched what changed while it was disconnected");
    await act("heal-edge-1");
    await page.waitForFunction(() => document.querySelector("#cluster-rows tr[data-key='edge-1'] td[data-label='State']")?.textContent?.includes("Healthy"), null, { timeout: 15000 });
    check(true, "events flow again after the reconnect");
    // The session ends elsewhere (another tab logs out): the page says so and asks to sign in.
    const res = await page.request.post(`${base}/api/v1/logout`, { headers: { "Content-Type": "application/json" }, data: "{}" });
    check(res.ok(), `logged out from another tab (${res.status()})`);
    await page.waitForFunction(() => document.getElementById("banner")?.textContent === "Signed out — sign in again", null, { timeout: 15000 });
    await page.waitForSelector("#token");
    check(page.url().endsWith("#/login"), "the page went to the login");
    await shot(page, "signed-out");
    await page.fill("#token", token);
    await page.click("button[type=submit]");
    await page.waitForSelector("h1:text('Servings')");
    check(await bannerText(page) === "", "signing in again clears the banner");
  },

  async "preview-diff"(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector("#preparations tr[data-key='web-3']");
    await page.click("#preparations tr[data-key='web-3'] button[data-action=preview]");
    await page.waitForSelector("#panel details.object", { timeout: 15000 });
    const objects = await page.$$eval("#panel details.object summary", s => s.map(x => x.textContent));
    check(objects.some(o => o?.includes("Deployment") && o.includes("web")) && objects.some(o => o?.includes("ConfigMap")), `the preview lists the objects (${objects})`);
    const images = await page.textContent("#panel");
    check(images?.includes("ghcr.io/stefanprodan/podinfo"), "the preview lists the pinned images");
    await page.click("#panel details.object summary");
    await shot(page, "preview");
    await page.click("#preparations tr[data-key='web-3'] button[data-action=diff]");
    await page.waitForSelector("#panel .diff, #panel .error", { timeout: 15000 });
    const diff = await page.textContent("#panel");
    check(!(await page.$("#panel .error")), `the diff is read (${diff})`);
    check(diff?.includes("web-2") && diff.includes("web-3"), "the diff names both Preparations");
    check(diff?.includes("ConfigMap") && diff.includes("replicas"), "the diff shows the new object and the changed field");
    await shot(page, "diff");
  },

  async "order-form"(page) {
    await login(page);
    await page.goto(`${base}/#/order?namespace=team-web`);
    await page.waitForSelector("#f-environment option", { state: "attached" });
    const options = await page.$$eval("#f-environment option", os => os.map(o => o.textContent));
    check(options.includes("edge (2 of 3 clusters Ready)"), `the Environment picker counts Ready clusters (${options})`);
    check(await page.title() === "New Order · Kokumi", "the title names the form");
    // A namespace with no Environment and no Product: every field of the Order is wrong.
    await page.fill("#f-namespace", "team-empty");
    await page.dispatchEvent("#f-namespace", "change");
    await page.waitForFunction(() => document.querySelectorAll("#f-environment option").length === 0);
    await page.fill("#f-name", "A".repeat(10000));
    await page.fill("#f-targetNamespace", "Not_A_Namespace");
    await page.click("#order-form button[type=submit]");
    await page.waitForSelector("#f-name-error:not([hidden])");
    for (const f of ["name", "product", "environment", "targetNamespace"]) {
      const invalid = await page.getAttribute(`#f-${f}`, "aria-invalid");
      const describedBy = await page.getAttribute(`#f-${f}`, "aria-describedby");
      const beside = await page.$eval(`#f-${f}`, el => {
        const err = el.parentElement?.querySelector(".field-error");
        return err && !err.hidden && err.id === el.getAttribute("aria-describedby") ? err.textContent : "";
      });
      check(invalid === "true" && describedBy === `f-${f}-error` && beside, `${f}: aria-invalid, and its error beside it (${(beside || "").slice(0, 80)})`);
    }
    check(await noSidewaysScroll(page), "a 10,000-character value does not widen the page");
    const formWidth = await page.$eval("#order-form", f => f.getBoundingClientRect().width);
    check(formWidth <= 520, `the form keeps its width (${formWidth})`);
    check(await page.evaluate(() => document.activeElement?.id) === "f-name", "the first wrong field has the focus");
    await shot(page, "order-errors");
  },

  async "cluster-held"(page) {
    await login(page);
    await page.goto(`${base}/#/clusters/edge-3`);
    await page.waitForSelector("#deployments tr[data-key='team-web/web']");
    check(await page.title() === "edge-3 · Cluster · Kokumi", `the title names the Cluster (${await page.title()})`);
    const state = await page.textContent("#deployments tr[data-key='team-web/web'] td[data-label='State']");
    check(state?.includes("Held") && state.includes("ClusterNotReady"), `the held Serving shows Held and why (${state})`);
    await shot(page, "cluster-held");
    await page.goto(`${base}/#/clusters/edge-1`);
    await page.waitForSelector("#deployments tr[data-key='team-web/web']");
    const ok = await page.textContent("#deployments tr[data-key='team-web/web'] td[data-label='State']");
    check(ok?.includes("Healthy") && !ok.includes("Held"), `a Ready cluster's row is not held (${ok})`);
  },

  // Nothing changes in the fleet: what the page says of time moves on all the same.
  async clock(page) {
    await act("fleet-deployed-now");
    await login(page);
    await page.goto(`${base}/#/servings/team-web/fleet`);
    await page.waitForSelector("#deployed-since");
    const first = await page.textContent("#deployed-since");
    check(/\d+s ago/.test(first || ""), `the Serving says since when it runs its revision (${first})`);
    await page.waitForFunction(before => document.querySelector("#deployed-since")?.textContent !== before, first, { timeout: 12000 });
    const later = await page.textContent("#deployed-since");
    check(later !== first && /\d+s ago/.test(later || ""), `the "ago" moved without any event (${first} → ${later})`);
  },

  async fleet(page) {
    await login(page);
    await page.goto(`${base}/#/servings/team-web/fleet`);
    await page.waitForSelector("#cluster-rows tbody tr");
    const rows = () => page.$$eval("#cluster-rows tbody tr", r => r.length);
    const range = () => page.textContent("#cluster-range");
    check(await rows() === 100, `one page of 100 rows (${await rows()})`);
    check((await range())?.includes("1–100 of 1050"), `the range and the exact total (${await range()})`);
    check((await page.textContent(".count[data-key='selected'] b")) === "1050", "the counts are exact");
    await page.click("button:text('Next')");
    await page.waitForFunction(() => document.getElementById("cluster-range")?.textContent?.includes("101–200"));
    check(true, "Next shows rows 101–200");
    await page.click("button:text('Previous')");
    await page.waitForFunction(() => document.getElementById("cluster-range")?.textContent?.includes("1–100"));
    await page.fill("#cluster-search", "store-0042");
    await page.waitForFunction(() => document.querySelectorAll("#cluster-rows tbody tr").length === 1);
    check(await page.textContent("#cluster-rows tbody tr td[data-label='Cluster']") === "store-0042", "the search finds one cluster by name");
    await page.fill("#cluster-search", "");
    await page.selectOption("#cluster-state", "Held");
    await page.waitForFunction(() => document.querySelectorAll("#cluster-rows tbody tr").length === 7);
    check(true, "the state filter keeps the 7 held clusters");
    check((await range())?.includes("of 7"), `the range counts what matches (${await range()})`);
    await shot(page, "fleet");
  },

  async "fleet-view"(page) {
    await login(page);
    // The Fleet link of the header leads to every Environment; one of them to its own page.
    await page.click("header nav a:text('Fleet')");
    await page.waitForSelector("a:text('team-stores/stores')");
    check(await page.title() === "Fleet · Kokumi", `the title names the page (${await page.title()})`);
    await page.click("a:text('team-stores/stores')");
    await page.waitForSelector("#fleet-rows tbody tr");
    const rows = () => page.$$eval("#fleet-rows tbody tr", r => r.length);
    const range = () => page.textContent("#fleet-range");
    const count = (/** @type {string} */ st) => page.textContent(`#fleet-counts .count[data-key='${st}'] b`);
    check(await rows() === 50, `one page of 50 clusters (${await rows()})`);
    check((await range())?.includes("1–50 of 120"), `the range and the exact total (${await range()})`);
    const heads = await page.$$eval("#fleet-rows thead th", t => t.map(x => x.textContent));
    check(heads.join(",") === "Cluster,pay,site", `a column per Order (${heads})`);
    check(await count("Drifted") === "1" && await count("Waiting") === "10" && await count("Held") === "2" && await count("Healthy") === "108",
      `the counts of every cell (${await page.textContent("#fleet-counts")})`);
    const drifted = await page.textContent("#fleet-rows tr[data-key='shop-003'] td[data-label='site']");
    check(drifted?.includes("↯") && drifted.includes("Drifted") && drifted.includes("site-2"), `the drifted cluster shows its glyph, word and release (${drifted})`);
    const waiting = await page.textContent("#fleet-rows tr[data-key='shop-010'] td[data-label='site']");
    check(waiting?.includes("Waiting") && waiting.includes("site-1") && waiting.includes("not the Serving's"), `a waiting cluster runs the release before (${waiting})`);
    const held = await page.textContent("#fleet-rows tr[data-key='shop-007'] td[data-label='pay']");
    check(held?.includes("Held") && held.includes("ClusterNotReady"), `a cluster not Ready is held (${held})`);
    await shot(page, "fleet-view");

    // The keyboard: type a label selector, Tab through the filters, page with Enter.
    await page.focus("#fleet-selector");
    await page.keyboard.type("region=us");
    await page.waitForFunction(() => document.getElementById("fleet-range")?.textContent?.includes("of 60 matching"));
    check(true, "the label selector keeps the 60 clusters in us");
    await page.keyboard.press("Tab");
    check((await focused(page)).id === "fleet-order", `Tab goes on to the Order filter (${JSON.stringify(await focused(page))})`);
    await page.keyboard.press("Tab");
    check((await focused(page)).id === "fleet-state", "then to the State filter");
    await page.focus("#fleet-next");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.getElementById("fleet-range")?.textContent?.includes("51–60 of 60"));
    check(await page.isDisabled("#fleet-next"), "Enter on Next shows clusters 51–60, and Next is off on the last page");
    await page.waitForFunction(() => document.activeElement?.id === "fleet-previous");
    check(true, "the focus moves on to Previous, not to the page's top");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.getElementById("fleet-range")?.textContent?.includes("1–50 of 60"));
    await page.waitForFunction(() => document.activeElement?.id === "fleet-next");
    check(true, "Enter on Previous goes back to the first page, the focus on Next");

    // The filters by state and by Order.
    await page.fill("#fleet-selector", "");
    await page.selectOption("#fleet-state", "Drifted");
    await page.waitForFunction(() => document.querySelectorAll("#fleet-rows tbody tr").length === 1);
    check(await page.textContent("#fleet-rows tbody tr td[data-label='Cluster']") === "shop-003", "the state filter keeps the drifted cluster");
    await page.selectOption("#fleet-state", "");
    await page.selectOption("#fleet-order", "team-stores/pay");
    await page.waitForFunction(() => document.querySelectorAll("#fleet-rows thead th").length === 2);
    check(await page.textContent("#fleet-rows thead th:nth-child(2)") === "pay", "the Order filter keeps the column of pay");
    check(await count("Progressing") === "119" && await count("Drifted") === "0", "the counts are those of pay's cells");

    // On a phone the rows become cards, without a sideways scroll.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.selectOption("#fleet-order", "");
    await page.waitForFunction(() => document.querySelectorAll("#fleet-rows thead th").length === 3);
    await page.waitForTimeout(100);
    check(await noSidewaysScroll(page), "fleet on a phone: no sideways scroll");
    const label = await page.$eval("#fleet-rows tr[data-key='shop-003'] td[data-label='site']", td => getComputedStyle(td, "::before").content);
    check(label.includes("site"), `a card labels each Order's cell (${label})`);
    await shot(page, "phone-fleet-view");
  },

  async phone(page) {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}/#/login`);
    await page.waitForSelector("#token");
    check(await noSidewaysScroll(page), "login: no sideways scroll");
    await login(page);
    const pages = [
      ["servings", "#/", "a:text('web')"],
      ["serving", "#/servings/team-web/web", "#cluster-rows tbody tr"],
      ["fleet", "#/servings/team-web/fleet", "#cluster-rows tbody tr"],
      ["clusters", "#/clusters", "table"],
      ["cluster", "#/clusters/edge-3", "#deployments tbody tr"],
      ["order", "#/order?namespace=team-web", "#f-environment option[value=edge]"],
      ["public-key", "#/public-key", "pre"],
    ];
    for (const [name, hash, ready] of pages) {
      await page.goto(`${base}/${hash}`);
      await page.waitForSelector(ready, { state: "attached" });
      await page.waitForTimeout(100);
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      check(width <= 390, `${name}: no sideways scroll (scrollWidth ${width})`);
      await shot(page, `phone-${name}`);
    }
    // The Serving counts wrap and stay in view.
    await page.goto(`${base}/#/servings/team-web/web`);
    await page.waitForSelector("#cluster-rows tbody tr");
    const outside = await page.$$eval(".count", cs => cs.filter(c => c.getBoundingClientRect().right > 390).length);
    check(outside === 0, "every count is within the screen");
    // A preview, and a confirmation with its diff.
    await page.click("#preparations tr[data-key='web-3'] button[data-action=preview]");
    await page.waitForSelector("#panel details.object", { timeout: 15000 });
    await page.click("#panel details.object summary");
    await page.click("#preparations tr[data-key='web-3'] button[data-action=promote]");
    await page.waitForSelector("#confirm .diff, #confirm .error", { timeout: 15000 });
    check(await noSidewaysScroll(page), "serving with a preview and a confirmation: no sideways scroll");
    await shot(page, "phone-serving-confirm");
    await page.click("#confirm-cancel");
    // The Order form with its errors.
    await page.goto(`${base}/#/order?namespace=team-empty`);
    await page.waitForSelector("#order-form");
    await page.fill("#f-name", "A".repeat(10000));
    await page.click("#order-form button[type=submit]");
    await page.waitForSelector("#f-name-error:not([hidden])");
    check(await noSidewaysScroll(page), "order with errors: no sideways scroll");
    await shot(page, "phone-order-errors");
  },

  // The Promote confirmation shows the roll-out plan beside the diff: without a policy, every
  // cluster at once; with two waves, both waves, their clusters, and what the budget means.
  async plan(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector(`${web3} button[data-action=promote]`);
    await page.click(`${web3} button[data-action=promote]`);
    await page.waitForSelector("#confirm-plan ul", { timeout: 15000 });
    let plan = await page.textContent("#confirm-plan");
    check(plan?.includes("Roll-out to edge") && plan.includes("every cluster at once, as without a policy: 3 clusters (1 not ready: held, not counted as failures)"),
      `without a policy the plan says every cluster at once (${plan})`);
    await page.click("#confirm-cancel");
    await page.waitForSelector("#confirm", { state: "detached" });

    await page.goto(`${base}/#/servings/team-web/planned`);
    const promote = "#preparations tr[data-key='planned-1'] button[data-action=promote]";
    await page.waitForSelector(promote);
    await page.click(promote);
    await page.waitForSelector("#confirm-plan ul", { timeout: 15000 });
    plan = await page.textContent("#confirm-plan");
    for (const want of [
      "Roll-out to waved",
      "wave canary: 1 cluster, then soak 10m0s",
      "wave rest: 2 clusters",
      "at most 1 of 2 clusters of wave rest update at once",
      "1 cluster may fail; one more halts the roll-out and rolls back to the last Preparation with a deployment record in this Environment",
    ]) check(plan?.includes(want), `the plan says "${want}" (${plan})`);
    const rows = await page.$$eval("#plan-waves tbody tr", rs => rs.map(r => Array.from(r.querySelectorAll("td")).map(td => td.textContent).join("|")));
    check(rows.join(";") === "canary|1|waved-1|10m0s|1;rest|2|waved-2, waved-3|—|1", `the plan's table lists both waves (${rows.join(";")})`);
    check((await page.textContent("#confirm"))?.includes("Nothing is deployed yet"), "the confirmation still says what changes");
    await shot(page, "plan-confirm");
    await page.click("#confirm-cancel");
    await page.waitForSelector("#confirm", { state: "detached" });
  },

  async "promote-rollback"(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector("#preparations tr[data-key='web-3'] button[data-action=promote]");
    await page.click("#preparations tr[data-key='web-3'] button[data-action=promote]");
    await page.waitForSelector("#confirm .diff, #confirm .error", { timeout: 15000 });
    const confirm = await page.textContent("#confirm");
    check(!(await page.$("#confirm .error")) && confirm?.includes("ConfigMap"), `the confirmation shows the diff before promoting (${confirm?.slice(0, 200)})`);
    await shot(page, "promote-confirm");
    await page.click("#confirm-yes");
    await page.waitForSelector("#promotion-message");
    const message = await page.textContent("#promotion-message");
    check(message?.includes("web-3 promoted"), `the promotion is done (${message})`);
    await page.waitForFunction(() => document.querySelector("#preparations tr[data-key='web-3'] td[data-label='Deployed']")?.textContent?.includes("promoted, rolling out"), null, { timeout: 15000 });
    check(true, "web-3 is promoted, rolling out (no controller runs here: the clusters still run web-2)");
    await page.waitForSelector("#rollback", { timeout: 15000 });
    const label = (await page.textContent("#rollback")) || "";
    const to = label.replace("Roll back to ", "");
    check(label.startsWith("Roll back to ") && to, `a Roll back button names where it goes (${label})`);
    await page.click("#rollback");
    await page.waitForSelector("#confirm .diff, #confirm .error, #confirm .note", { timeout: 15000 });
    await page.waitForFunction(() => !document.querySelector("#confirm")?.textContent?.includes("Comparing"), null, { timeout: 15000 });
    const rollback = await page.textContent("#confirm");
    // No controller runs here: the clusters still run web-2, what the rollback goes back to.
    check(!(await page.$("#confirm .error")) && rollback?.includes(`${to} renders the same as ${to}`), `the rollback confirmation compares with what runs (${rollback?.slice(0, 300)})`);
    await page.waitForSelector("#confirm-plan ul", { timeout: 15000 });
    const rollbackPlan = await page.textContent("#confirm-plan");
    check(rollbackPlan?.includes("every cluster at once"), `the rollback confirmation shows the roll-out plan (${rollbackPlan})`);
    await shot(page, "rollback-confirm");
    await page.click("#confirm-yes");
    await page.waitForFunction(() => document.getElementById("promotion-message")?.textContent?.includes("Rolled back"), null, { timeout: 15000 });
    check(true, `rolled back (${await page.textContent("#promotion-message")})`);
    await page.waitForFunction(name => { const t = document.querySelector(`#preparations tr[data-key='${name}'] td[data-label='Deployed']`)?.textContent || ""; return t.includes("runs on 3 clusters") && !t.includes("promoted"); }, to, { timeout: 15000 });
    check((await page.textContent("#promotion-message"))?.includes("every cluster runs it already"), `${to} runs everywhere: the rollback says nothing waits`);
  },
};

// The scenarios of issue #25's UI points: each fails without the change it checks.
Object.assign(scenarios, {
  // An Order that never rendered is listed beside the Servings, with why; its Serving page
  // falls back to it.
  async orders(page) {
    await login(page);
    await page.waitForSelector("#orders tr[data-key='team-web/broken']");
    const row = await page.textContent("#orders tr[data-key='team-web/broken']");
    check(row?.includes("SourceNotFound") && row.includes("version 9.9.9 not found") && row.includes("none yet"),
      `the Order that never rendered is listed with its reason and message, and no Serving (${row})`);
    const web = await page.textContent("#orders tr[data-key='team-web/web'] td[data-label='Serving']");
    check(web === "web", `an Order with a Serving links to it (${web})`);
    await shot(page, "orders");
    await page.goto(`${base}/#/servings/team-web/broken`);
    await page.waitForSelector("#serving-missing");
    const missing = await page.textContent("#serving-missing");
    check(missing?.includes("SourceNotFound") && missing.includes("version 9.9.9 not found"), `the Serving page of a Serving that does not exist shows its Order's condition (${missing})`);
    check(!(await page.$("[data-key='load-error']")), "and no \"not found\" error");
    await shot(page, "serving-missing");
  },

  async "servings-held"(page) {
    await login(page);
    const cell = await page.textContent("#servings tr[data-key='team-web/web'] td[data-label='Clusters']");
    check(cell === "1/3 healthy, 1 held", `the Servings table counts the held clusters (${cell})`);
  },

  // The keyboard through Promote, Escape, Cancel; the buttons' names say their row.
  async "focus-confirm"(page) {
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector(`${web3} button[data-action=promote]`);
    const names = await page.$$eval(`${web3} button`, bs => bs.map(b => b.getAttribute("aria-label")));
    check(names.join("|") === "Preview web-3|Diff web-3 with deployed web-2|Promote web-3 to edge", `each button's name says its row (${names})`);
    await page.focus(`${web3} button[data-action=promote]`);
    await page.keyboard.press("Enter");
    await page.waitForSelector("#confirm .diff", { timeout: 15000 });
    await page.waitForTimeout(100);
    let f = await focused(page, "#confirm");
    check(f.inside && !f.body, `once the diff arrived the focus is in the confirmation (${JSON.stringify(f)})`);
    await page.keyboard.press("Escape");
    await page.waitForSelector("#confirm", { state: "detached" });
    f = await focused(page);
    check(f.label === "Promote web-3 to edge", `Escape closes the confirmation and gives the focus back to Promote (${JSON.stringify(f)})`);
    await page.keyboard.press("Enter");
    await page.waitForSelector("#confirm .diff", { timeout: 15000 });
    await page.focus("#confirm-cancel");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#confirm", { state: "detached" });
    f = await focused(page);
    check(f.label === "Promote web-3 to edge", `Cancel gives the focus back to Promote (${JSON.stringify(f)})`);
  },

  // On a phone the preview opens below the fold: it is scrolled into view and focused; Close
  // gives the focus back.
  async "focus-panel"(page) {
    await page.setViewportSize({ width: 390, height: 844 });
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector(`${web3} button[data-action=preview]`);
    await page.tap(`${web3} button[data-action=preview]`).catch(() => page.click(`${web3} button[data-action=preview]`));
    await page.waitForSelector("#panel details.object", { timeout: 15000 });
    const f = await focused(page);
    check(f.id === "panel", `the panel has the focus (${JSON.stringify(f)})`);
    const top = await page.$eval("#panel", el => el.getBoundingClientRect().top);
    check(top >= 0 && top < 844 / 2, `the panel is scrolled into view (its top at ${Math.round(top)} px)`);
    await shot(page, "phone-panel");
    await page.focus("#panel-close");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#panel", { state: "detached" });
    const back = await focused(page);
    check(back.label === "Preview web-3", `Close gives the focus back to Preview (${JSON.stringify(back)})`);
  },

  // A skip link first; a route change puts the focus on the new page's heading.
  async "focus-route"(page) {
    await login(page);
    await page.goto(`${base}/#/`);
    await page.reload();
    await page.waitForSelector("#servings");
    await page.keyboard.press("Tab");
    let f = await focused(page);
    check(f.id === "skip" && f.text.includes("Skip to main content"), `the first Tab reaches the skip link (${JSON.stringify(f)})`);
    await page.keyboard.press("Enter");
    f = await focused(page, "#view");
    check(f.inside || f.id === "view", `the skip link moves the focus to the page (${JSON.stringify(f)})`);
    await page.click("#servings tr[data-key='team-web/web'] a");
    await page.waitForSelector("#cluster-rows tbody tr");
    f = await focused(page);
    check(f.tag === "H1" && f.text.includes("Serving team-web/web"), `a route change focuses the new page's heading (${JSON.stringify(f)})`);
  },

  // What cannot succeed is disabled, and says why: the stages refuse it, or RBAC does.
  async disabled(page) {
    await login(page);
    await page.goto(`${base}/#/servings/team-web/gated`);
    const gated = "#preparations tr[data-key='gated-1'] button[data-action=promote]";
    await page.waitForSelector(gated);
    check(await page.isDisabled(gated), "Promote is disabled when the pipeline already refuses it");
    const why = await page.$eval(gated, b => document.getElementById(b.getAttribute("aria-describedby") || "")?.textContent || "");
    check(why.includes("prod has not deployed this release"), `and says why, in the pipeline's words (${why})`);
    await shot(page, "promote-blocked");
    // A person who may read and change nothing.
    await page.context().clearCookies();
    await login(page, viewerToken);
    await page.goto(servingURL);
    await page.waitForSelector(`${web3} button[data-action=promote]`);
    check(await page.isDisabled(`${web3} button[data-action=promote]`), "Promote is disabled for a person who may not patch the Serving");
    check(await page.isDisabled("#rollback"), "so is Roll back");
    const denied = await page.textContent("#promote-denied");
    check(denied?.includes("may not patch servings"), `and the page says why (${denied})`);
    check(await page.getAttribute(`${web3} button[data-action=promote]`, "aria-describedby") === "promote-denied", "the button is described by the reason");
    await shot(page, "promote-denied");
    await page.goto(`${base}/#/order?namespace=team-web`);
    await page.waitForSelector("#order-denied:not([hidden])");
    check(await page.isDisabled("#order-form button[type=submit]"), "Create Order is disabled for a person who may not create Orders");
    const orderDenied = await page.textContent("#order-denied");
    check(orderDenied?.includes("may not create orders"), `and says why (${orderDenied})`);
  },

  // An Order's name is at most 53 characters; the API server's refusals go beside Name.
  async "order-name"(page) {
    await login(page);
    await page.goto(`${base}/#/order`);
    await page.waitForSelector("#f-environment option", { state: "attached" });
    const ns = await page.inputValue("#f-namespace");
    check(["team-stages", "team-web"].includes(ns), `the namespace is the first where the person may order, not platform (${ns})`);
    if (ns !== "team-web") {
      await page.fill("#f-namespace", "team-web");
      await page.dispatchEvent("#f-namespace", "change");
      await page.waitForSelector("#f-environment option[value=edge]", { state: "attached" });
    }
    await page.fill("#f-name", "a".repeat(54));
    await page.waitForSelector("#f-name-error:not([hidden])");
    const typed = await page.textContent("#f-name-error");
    check(typed?.includes("53"), `a 54-character name is refused as it is typed, beside Name (${typed})`);
    await page.selectOption("#f-environment", "edge");
    await page.click("#order-form button[type=submit]");
    await page.waitForFunction(() => document.getElementById("order-message")?.className === "error");
    const beside = await page.textContent("#f-name-error");
    check(beside?.includes("53 characters"), `the server's refusal is beside Name (${beside})`);
    const message = await page.textContent("#order-message");
    check(message?.includes("marked above") && !message.includes("<nil>"), `the message says where the fields are (${message})`);
    await shot(page, "order-name");
    await page.fill("#f-name", "web");
    await page.click("#order-form button[type=submit]");
    await page.waitForFunction(() => document.getElementById("f-name-error")?.textContent?.includes("already exists"));
    check(await page.getAttribute("#f-name", "aria-invalid") === "true", "\"already exists\" is beside Name");
  },

  // A first visit without a session shows the sign-in form, without a red banner.
  async "first-visit"(page) {
    await page.goto(`${base}/`);
    await page.waitForSelector("#token");
    await page.waitForTimeout(1500); // the event stream and the page have been refused by now
    check(await bannerText(page) === "", `no banner on a first visit (${await bannerText(page)})`);
    check(!(await page.$(".banner.bad")), "nothing red");
  },

  // A Serving rolling out in waves shows what the controller decided: the state, the current
  // wave and since when it is healthy, and each wave's counts.
  async rollout(page) {
    await login(page);
    await page.goto(`${base}/#/servings/team-web/waves`);
    await page.waitForSelector("section[data-key=rollout]");
    const state = await page.textContent("#rollout-state");
    check(state?.includes("Progressing") && state.includes("current wave canary") && state.includes("waves-1"), `the state, the current wave and what the waves not reached run (${state})`);
    const rows = await page.$$eval("section[data-key=rollout] tbody tr", rs => rs.filter(r => !r.closest("#verifications")).map(r => Array.from(r.querySelectorAll("td")).map(td => td.textContent)));
    check(JSON.stringify(rows) === JSON.stringify([["canary", "1", "1", "0", "0", "0"], ["rest", "4", "0", "0", "0", "4"]]), `each wave's counts (${JSON.stringify(rows)})`);
    check(await page.$("section[data-key=rollout] [aria-current=step]") !== null, "the current wave is marked for a screen reader");
    // The canary's verification, as the controller tallied it: the result, the runs and what
    // the last run said.
    const checks = await page.$$eval("#verifications tbody tr", rs => rs.map(r => Array.from(r.querySelectorAll("td")).map(td => td.textContent)));
    check(checks.length === 1 && checks[0][0] === "error-rate" && checks[0][1] === "wave canary" && checks[0][2] === "http" &&
      checks[0][3]?.includes("Running") && checks[0][4] === "1 passed in a row, 0 failed, of 1" && checks[0][5]?.startsWith("last run ") &&
      checks[0][6]?.includes("successCondition holds; the answer: 200 OK"), `the verification's result (${JSON.stringify(checks)})`);
    await shot(page, "rollout");
  },

  // Pause on the Roll-out section: a viewer sees it disabled, and why; whoever may patch the
  // Serving pauses it, the page says who asked, and once the controller's status says Paused,
  // "paused by" that person, with Resume in place of Pause. Abort asks first; Cancel keeps it.
  async "rollout-controls"(page) {
    const heldURL = `${base}/#/servings/team-web/held`;
    await login(page, viewerToken);
    await page.goto(heldURL);
    await page.waitForSelector("#rollout-pause");
    check(await page.isDisabled("#rollout-pause") && await page.isDisabled("#rollout-abort"), "a viewer sees Pause and Abort disabled");
    const why = await page.textContent("#rollout-denied");
    check(why?.includes("Pause, Resume and Abort are disabled") && why.includes("may not patch servings"), `and why (${why})`);
    check(await page.getAttribute("#rollout-pause", "aria-describedby") === "rollout-denied", "the reason describes the button");
    await shot(page, "rollout-controls-viewer");
    // web's Environment has no roll-out policy and web is not Deployed: Pause is offered too.
    await page.goto(servingURL);
    await page.waitForSelector("#rollout-pause");
    const atOnce = await page.textContent("#rollout-state");
    check(atOnce?.includes("rolls out to every cluster at once") && !(await page.$("section[data-key=rollout] table")), `without a policy, the section says so, without waves (${atOnce})`);

    await page.context().clearCookies();
    await login(page);
    await page.goto(heldURL);
    await page.waitForSelector("#rollout-pause:not([disabled])");
    check(!(await page.$("#rollout-resume")), "no Resume while the roll-out goes on");
    // Abort asks first; Cancel leaves everything as it was.
    await page.click("#rollout-abort");
    await page.waitForSelector("#confirm-abort");
    const title = await page.textContent("#confirm-abort-title");
    check(title === "Abort the roll-out of held-2?", `Abort asks first (${title})`);
    await page.click("#confirm-abort-cancel");
    await page.waitForSelector("#confirm-abort", { state: "detached" });
    check(await page.evaluate(() => document.activeElement?.id) === "rollout-abort", "Cancel gives the focus back to Abort");

    await page.click("#rollout-pause");
    await page.waitForFunction(() => document.getElementById("rollout-action-message")?.textContent?.startsWith("Paused the roll-out of held-2"));
    await page.waitForSelector("#rollout-asked");
    const asked = (await page.textContent("#rollout-asked")) || "";
    const by = asked.match(/^Pause asked by (.+); Kokumi acts on it shortly\.$/)?.[1] || "";
    check(by !== "" && by !== "kokumi:admin-token", `the page says who asked, as the API server names them (${asked})`);
    await page.waitForSelector("#rollout-resume");
    check(!(await page.$("#rollout-pause")), "Resume takes the place of Pause");

    await act("held-follows-spec");
    await page.waitForFunction(b => document.getElementById("rollout-by")?.textContent?.includes(`paused by ${b}`), by);
    const state = await page.textContent("#rollout-state");
    check(state?.includes("Paused") && state.includes(`paused by ${by}`), `the state says Paused, and by whom (${state})`);
    check(!(await page.$("#rollout-asked")), "the pause asked is no longer pending once the status says Paused");
    await shot(page, "rollout-controls-paused");

    await page.click("#rollout-resume");
    await page.waitForSelector("#rollout-pause");
    await act("held-follows-spec");
    await page.waitForFunction(() => !document.getElementById("rollout-by") && document.getElementById("rollout-state")?.textContent?.includes("Progressing"));
    check(true, "resumed, the roll-out is Progressing again");

    // Abort, confirmed: the page says so, and what was asked, until the controller acts.
    await page.click("#rollout-abort");
    await page.waitForSelector("#confirm-abort-yes");
    await page.click("#confirm-abort-yes");
    await page.waitForFunction(() => document.getElementById("rollout-action-message")?.textContent?.startsWith("Aborted the roll-out of held-2"));
    await page.waitForSelector("#rollout-abort", { state: "detached" });
    const abortAsked = await page.textContent("#rollout-asked");
    check(abortAsked === `Abort asked by ${by}; Kokumi acts on it shortly.`, `the abort is asked, by the same person (${abortAsked})`);
    check(!(await page.$("#confirm-abort")) && !(await page.$("#rollout-abort")), "no second Abort of an aborted roll-out");
    await shot(page, "rollout-controls-aborted");
  },

  // Approve on the Roll-out section, while the wave canary of gate-2 waits for two approvals
  // (dana's counts; frank's is of gate-1): a viewer sees it disabled, and why; so does the
  // admin, who promoted gate-2, while the gate asks someone else; once someone else promoted
  // it, the admin approves, and the page counts them.
  async approve(page) {
    const gateURL = `${base}/#/servings/team-web/gate`;
    await login(page, viewerToken);
    await page.goto(gateURL);
    await page.waitForSelector("#approve");
    const state = await page.textContent("#approval-state");
    check(state?.includes("The roll-out of gate-2 awaits approval of wave canary: 1 of 2 (approved by dana)") && !state.includes("frank"),
      `the gate, the count and who approved gate-2 (${state})`);
    check(await page.isDisabled("#approve"), "a viewer sees Approve disabled");
    const why = await page.textContent("#approve-denied");
    check(why?.includes("Approve is disabled") && why.includes("may not approve servings"), `and why (${why})`);
    check(await page.getAttribute("#approve", "aria-describedby") === "approve-denied", "the reason describes the button");
    await shot(page, "approve-viewer");

    await page.context().clearCookies();
    await login(page);
    await page.goto(gateURL);
    await page.waitForSelector("#approve-denied");
    const own = await page.textContent("#approve-denied");
    check(own?.includes("asks that someone else approve wave canary") && await page.isDisabled("#approve"), `the promoter may not approve (${own})`);
    const promoted = await page.textContent("#approval-state");
    check(promoted?.includes("promoted it, so someone else must approve"), `the page says the promoter may not (${promoted})`);

    await act("gate-promoted-by-someone-else");
    await page.reload();
    await page.waitForSelector("#approve:not([disabled])");
    const label = await page.textContent("#approve");
    check(label === "Approve wave canary (1 of 2)", `the button names the gate and the count (${label})`);
    await page.click("#approve");
    await page.waitForFunction(() => document.getElementById("approve-message")?.textContent === "Approved wave canary of gate-2: 2 of 2; the roll-out goes past it.");
    check(await page.evaluate(() => document.activeElement?.id) === "approve-message", "the focus moves to what happened");
    await page.waitForFunction(() => /2 of 2 \(approved by dana, .+\)/.test(document.getElementById("approval-state")?.textContent || ""));
    const again = await page.textContent("#approve-denied");
    check(again?.includes("already approved wave canary of Preparation gate-2") && await page.isDisabled("#approve"), `no second approval (${again})`);
    await shot(page, "approve-approved");
  },

  // A viewer who may not get Secrets sees that the Secrets' values are hidden, and none of
  // them, in the preview and in the diff; who may get them sees them and no note.
  async "secrets-hidden"(page) {
    const passwords = ["czNjcjN0LXdlYi0z", "czNjcjN0LXdlYi0y"]; // base64 of s3cr3t-web-3, s3cr3t-web-2
    await login(page, viewerToken);
    await page.goto(servingURL);
    await page.waitForSelector(`${web3} button[data-action=preview]`);
    await page.click(`${web3} button[data-action=preview]`);
    await page.waitForSelector("#panel details.object", { timeout: 15000 });
    for (const what of ["preview", "diff"]) {
      if (what === "diff") {
        await page.click(`${web3} button[data-action=diff]`);
        await page.waitForSelector("#panel .diff", { timeout: 15000 });
      }
      const note = await page.textContent("#panel .redacted");
      check(/hidden/i.test(note || "") && (note || "").includes("web-db"), `${what}: the viewer is told which Secret's values are hidden (${note})`);
      const text = await page.$eval("#panel", el => el.textContent || "");
      check(!passwords.some(p => text.includes(p)), `${what}: no password reaches the viewer`);
    }
    await shot(page, "secrets-hidden");
    await page.context().clearCookies();
    await login(page);
    await page.goto(servingURL);
    await page.waitForSelector(`${web3} button[data-action=preview]`);
    await page.click(`${web3} button[data-action=preview]`);
    await page.waitForSelector("#panel details.object", { timeout: 15000 });
    check(!(await page.$("#panel .redacted")), "who may get Secrets is told nothing is hidden");
    const text = await page.$eval("#panel", el => el.textContent || "");
    check(text.includes(passwords[0]), "and sees the value");
  },

  // Bidirectional control characters are flagged in the preview and in the diff.
  async bidi(page) {
    await login(page);
    await page.goto(servingURL);
    await page.click(`${web3} button[data-action=preview]`);
    await page.waitForSelector("#panel details.object", { timeout: 15000 });
    for (const what of ["preview", "diff"]) {
      if (what === "diff") {
        await page.click(`${web3} button[data-action=diff]`);
        await page.waitForSelector("#panel .diff", { timeout: 15000 });
      }
      const warning = await page.textContent("#panel .bidi-warning");
      check(warning?.includes("bidirectional"), `${what}: a warning says there are bidirectional characters (${warning})`);
      const marks = await page.$$eval("#panel pre .bidi", ms => ms.map(m => m.textContent));
      check(marks.includes("⟨U+202E⟩"), `${what}: the U+202E is marked where it stands (${marks})`);
      const raw = await page.$eval("#panel", el => /[\u202A-\u202E\u2066-\u2069]/.test(el.textContent || ""));
      check(!raw, `${what}: no bidirectional character is left to act`);
    }
    await shot(page, "bidi");
  },

  // A stage passed by another Order with other values says which Order, and that the values
  // differ (internal/promotion's words).
  async "stage-other-values"(page) {
    await login(page);
    await page.goto(`${base}/#/servings/team-stages/web-prod`);
    const row = "section[data-key=pipeline] tr[data-key='staging']";
    await page.waitForSelector(row, { timeout: 15000 });
    await page.waitForFunction(sel => document.querySelector(sel)?.textContent?.includes("Passed"), row, { timeout: 15000 });
    const text = await page.textContent(row);
    check(text?.includes("Order web-staging") && text.includes("other values"), `the passed stage names the Order and says its values differ (${text})`);
    await shot(page, "stage-other-values");
  },

  // A refused Host's 421 carries the security headers.
  async misdirected() {
    const res = await getWithHost("/", "evil.example");
    check(res.status === 421, `a request for another host is refused with 421 (${res.status})`);
    for (const h of ["content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy", "cross-origin-opener-policy"]) {
      check(res.headers[h], `the 421 carries ${h}`);
    }
  },
});

// A newcomer's and a tenant's second hour, at desktop and at phone width.
Object.assign(scenarios, {
  // Create Order links to the new Serving, and the Name's placeholder is no Order's name; the
  // Environment picker names the approval gate; Preparation cards keep their labels apart and
  // count tiles break no word; a page the person may not read says so under a heading, with a
  // way back.
  async newcomer(page) {
    for (const [width, height] of [[1280, 900], [390, 844]]) {
      await page.setViewportSize({ width, height });
      await login(page);
      await page.goto(`${base}/#/order?namespace=team-web`);
      await page.waitForSelector("#f-environment option", { state: "attached" });
      const placeholder = await page.getAttribute("#f-name", "placeholder");
      check(placeholder === "new-order-name", `${width}: the Name's placeholder is no Order's name (${placeholder})`);
      await page.selectOption("#f-environment", "one-gate");
      await page.dispatchEvent("#f-environment", "change");
      const gate = await page.textContent("#f-environment-requires");
      check(gate?.includes("asks 1 approval") && gate.includes("kokumi-approver"), `${width}: the picker names the approval gate (${gate})`);
      await page.selectOption("#f-environment", "edge");
      await page.fill("#f-name", `newcomer-${width}`);
      await page.click("#order-form button[type=submit]");
      await page.waitForSelector("#order-created", { timeout: 15000 });
      const href = await page.getAttribute("#order-created", "href");
      check(href === `#/servings/team-web/newcomer-${width}`, `${width}: the message links to the new Serving (${href})`);
      await page.click("#order-created");
      await page.waitForFunction(w => location.hash === `#/servings/team-web/newcomer-${w}`, width);

      await page.goto(servingURL);
      await page.waitForSelector("#preparations tr[data-key='web-1']");
      if (width < 640) {
        const fits = await page.$$eval("#preparations td[data-label='Target namespace']", tds => tds.map(td => {
          const label = parseFloat(getComputedStyle(td, "::before").height);
          return td.getBoundingClientRect().height + 0.5 >= label;
        }));
        check(fits.length > 0 && fits.every(Boolean), `${width}: each card's Target namespace label stays in its row (${fits})`);
      }
      const broken = await page.$$eval(".count", tiles => tiles.filter(t => {
        const text = t.lastChild;
        if (!text) return false;
        const r = document.createRange();
        r.selectNodeContents(text);
        return r.getClientRects().length > 1;
      }).map(t => t.textContent));
      check(broken.length === 0, `${width}: no count tile breaks its word (${broken})`);
      check(await noSidewaysScroll(page), `${width}: no sideways scroll`);
      await shot(page, `newcomer-${width}`);

      await page.context().clearCookies();
      await login(page, viewerToken);
      await page.goto(`${base}/#/clusters`);
      await page.waitForSelector("h1:text('You may not see this page')", { timeout: 15000 });
      check(await page.isVisible("#back-to-servings"), `${width}: the refused page leads back`);
      await page.click("#back-to-servings");
      await page.waitForSelector("h1:text('Servings')");
      await page.context().clearCookies();
    }
  },
});

// What the clusters run, and what happens next: at desktop and at phone width.
Object.assign(scenarios, {
  // The Serving runs: both clusters run runs-1; runs-2 is promoted and awaits the Environment's
  // approval (no roll-out policy). The page labels each by what runs and how the promoted one
  // stands, shows no waves, diffs against what runs; Approve's result stays once the gate
  // passed; after an abort Roll back compares with what runs, its plan asks for no approval
  // (the clusters run runs-1 already) and it says nothing waits; Promote into the gate says it
  // waits for an approval. The page says once who may approve.
  async runs(page) {
    await login(page);
    const runsURL = `${base}/#/servings/team-web/runs`;
    const cell = (/** @type {string} */ name) => `#preparations tr[data-key='${name}'] td[data-label='Deployed']`;
    for (const [width, height] of [[1280, 900], [390, 844]]) {
      await act("runs-reset");
      await page.setViewportSize({ width, height });
      await page.goto(runsURL);
      await page.reload();
      await page.waitForFunction(sel => document.querySelector(sel)?.textContent?.includes("promoted, awaiting approval"), cell("runs-2"), { timeout: 15000 });
      const running = await page.textContent(cell("runs-1"));
      check(running?.includes("runs on 2 clusters"), `${width}: runs-1 is marked as what the clusters run (${running})`);
      const promoted = await page.textContent(cell("runs-2"));
      check(!promoted?.includes("deployed now") && !promoted?.includes("runs on"), `${width}: runs-2 is promoted, not running (${promoted})`);
      const state = (await page.textContent("#rollout-state")) || "";
      check(!state.includes("in waves") && !state.includes("unselected") && !(await page.$("section[data-key=rollout] table")),
        `${width}: without a roll-out policy no wave is shown (${state})`);
      // Who may approve, and how, is said once on the page (the roll-out's message).
      const main = await page.evaluate(() => document.querySelector("main")?.innerText || document.body.innerText);
      const who = main.split("kokumi-approver").length - 1, how = main.split("kubectl kokumi approve").length - 1;
      check(who === 1 && how === 1, `${width}: the page says once who may approve (kokumi-approver ${who} times, kubectl kokumi approve ${how} times)`);
      const diff = await page.getAttribute("#preparations tr[data-key='runs-2'] button[data-action=diff]", "aria-label");
      check(diff === "Diff runs-2 with deployed runs-1", `${width}: the diff compares with what runs (${diff})`);
      check(!(await page.$("#preparations tr[data-key='runs-1'] button[data-action=diff]")), `${width}: what runs has no diff with itself`);

      await page.click("#approve");
      await page.waitForSelector("#approve-message");
      const approved = await page.textContent("#approve-message");
      check(approved?.includes("1 of 1; the roll-out goes past it."), `${width}: Approve says what happens next (${approved})`);
      await act("runs-gate-passed");
      await page.waitForSelector("#approve", { state: "detached", timeout: 15000 });
      const kept = await page.textContent("#approve-message");
      const f = await focused(page);
      check(kept === approved && !f.body, `${width}: once the gate passed, the result stays and keeps the focus (${kept}, focus ${f.id || f.tag})`);

      await act("runs-aborted");
      await page.waitForFunction(sel => document.querySelector(sel)?.textContent?.includes("promoted, aborted"), cell("runs-2"), { timeout: 15000 });
      await page.click("#rollback");
      await page.waitForFunction(() => { const t = document.querySelector("#confirm")?.textContent || ""; return t && !t.includes("Comparing"); }, null, { timeout: 15000 });
      const confirm = await page.textContent("#confirm");
      check(confirm?.includes("runs-1 renders the same as runs-1"), `${width}: Roll back compares with what runs (${confirm?.slice(0, 200)})`);
      await page.waitForSelector("#confirm-plan .plan-summary", { timeout: 15000 });
      const plan = await page.textContent("#confirm-plan");
      check(plan?.includes("the roll-out starts without approval: 2 clusters of 2 run this Preparation already") && !plan.includes("approves"),
        `${width}: Roll back's plan asks for no approval the rollback does not need (${plan})`);
      await page.click("#confirm-yes");
      await page.waitForFunction(() => document.getElementById("promotion-message")?.textContent?.includes("Rolled back"), null, { timeout: 15000 });
      const rolled = await page.textContent("#promotion-message");
      check(rolled?.includes("every cluster runs it already"), `${width}: Roll back says nothing waits (${rolled})`);

      const promote = "#preparations tr[data-key='runs-2'] button[data-action=promote]";
      await page.waitForSelector(promote, { timeout: 15000 });
      await page.click(promote);
      await page.waitForSelector("#confirm-yes");
      await page.click("#confirm-yes");
      await page.waitForFunction(() => document.getElementById("promotion-message")?.textContent?.includes("runs-2 promoted"), null, { timeout: 15000 });
      const next = await page.textContent("#promotion-message");
      check(next?.includes("it waits for 1 approval of Environment one-gate") && next.includes("before any cluster takes it"), `${width}: Promote into the gate says it waits (${next})`);
      check(await noSidewaysScroll(page), `${width}: no sideways scroll`);
      await shot(page, `runs-${width}`);
    }
  },
});

const name = process.argv[2];
const run = scenarios[name];
if (!run) {
  console.error(`no scenario ${name}: one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
/** @type {string[]} */
const problems = [];
page.on("pageerror", e => problems.push(`page error: ${e.message}`));
page.on("console", m => { if (m.type() === "error") console.log(`console: ${m.text()}`); });
page.setDefaultTimeout(10000);
let code = 0;
try {
  await run(page);
  if (problems.length) throw new Error(problems.join("\n"));
  console.log(`PASS ${name}`);
} catch (e) {
  code = 1;
  console.error(`FAIL ${name}: ${e instanceof Error ? e.stack || e.message : e}`);
  await shot(page, `${name}-failure`).catch(() => undefined);
} finally {
  await browser.close();
}
process.exit(code);
