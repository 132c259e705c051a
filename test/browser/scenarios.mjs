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

const base = must("KOKUMI_BASE");
const token = must("KOKUMI_TOKEN");
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

/** @param {import("playwright-core").Page} page */
async function login(page) {
  await page.goto(`${base}/#/login`);
  await page.fill("#token", token);
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
    check(counts.length === 5 && counts[0]?.includes("3") && counts[0].includes("selected"), `the counts are shown (${counts})`);
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
    await page.waitForFunction(() => document.querySelector("#preparations tr[data-key='web-3'] td[data-label='Deployed']")?.textContent?.includes("deployed now"), null, { timeout: 15000 });
    check(true, "web-3 is the deployed Preparation");
    await page.waitForSelector("#rollback", { timeout: 15000 });
    const label = (await page.textContent("#rollback")) || "";
    const to = label.replace("Roll back to ", "");
    check(label.startsWith("Roll back to ") && to, `a Roll back button names where it goes (${label})`);
    await page.click("#rollback");
    await page.waitForSelector("#confirm .diff, #confirm .error, #confirm .note", { timeout: 15000 });
    await page.waitForFunction(() => !document.querySelector("#confirm")?.textContent?.includes("Comparing"), null, { timeout: 15000 });
    const rollback = await page.textContent("#confirm");
    check(!(await page.$("#confirm .error")) && rollback?.includes(to) && rollback.includes("web-3"), `the rollback confirmation shows its diff (${rollback?.slice(0, 200)})`);
    await shot(page, "rollback-confirm");
    await page.click("#confirm-yes");
    await page.waitForFunction(() => document.getElementById("promotion-message")?.textContent?.includes("Rolled back"), null, { timeout: 15000 });
    check(true, `rolled back (${await page.textContent("#promotion-message")})`);
    await page.waitForFunction(name => document.querySelector(`#preparations tr[data-key='${name}'] td[data-label='Deployed']`)?.textContent?.includes("deployed now"), to, { timeout: 15000 });
    check(true, `${to} is deployed again`);
  },
};

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
