// The dashboard's browser test, run by e2e_test.go: Debian's chromium
// driven by playwright-core, axe-core for accessibility. It talks to the
// Go test on stdin/stdout: prints "ready" once the page is up, then waits
// for "sent N" (the Go test sent N requests) and checks the page shows
// them. Environment: DASHBOARD_URL, CHROMIUM_PATH, WEB_DIR (node_modules),
// SCREENSHOT (a path, optional), EXPECT_INSTANCES, EDIT, LEAVE,
// ADMIN_TOKEN, NEW_RATE.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const require = createRequire(join(process.env.WEB_DIR, 'package.json'));
const { chromium } = require('playwright-core');
const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const fail = (msg) => { throw new Error(msg); };
const url = process.env.DASHBOARD_URL;
const profile = mkdtempSync(join(tmpdir(), 'redlimit-e2e-'));

// editAndFollow: writes without the token are refused; with it, a rate
// edited in the page (validated, confirmed) reaches every instance. The
// Go test checks the instances' rules versions and their next answers.
async function editAndFollow(page) {
  const policy = 'edge/remote_address';
  const editButton = page.locator(`#rules-body tr[data-policy="${policy}"] button`);
  if (!(await editButton.isDisabled())) fail('Edit is enabled without a token');
  const noToken = await page.evaluate(async () => (await fetch('/v1/rules/edge/remote_address', { method: 'PUT', body: '{"limits":[{"rate":1,"interval":"1s"}]}' })).status);
  if (noToken !== 401) fail('a write without a token answered ' + noToken);
  const badToken = await page.evaluate(async () => (await fetch('/v1/rules/edge/remote_address', { method: 'PUT', headers: { Authorization: 'Bearer wrong' }, body: '{"limits":[{"rate":1,"interval":"1s"}]}' })).status);
  if (badToken !== 401) fail('a write with a wrong token answered ' + badToken);
  console.log('writes without the token refused: 401');

  await page.fill('#token', process.env.ADMIN_TOKEN);
  await page.click('#token-form button[type="submit"]');
  await page.locator('#mode', { hasText: 'Writes enabled' }).waitFor();
  if ((await page.inputValue('#token')) !== '') fail('the token stays in the field');
  if ((await page.content()).includes(process.env.ADMIN_TOKEN)) fail('the token is in the page');
  await editButton.click();
  await page.locator('#edit[open]').waitFor();

  // The edit form is accessible too.
  const result = await page.evaluate(() => window.axe.run(document.getElementById('edit'), { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  if (bad.length) fail('axe-core on the edit form: ' + bad.map((v) => `${v.impact} ${v.id}: ${v.help}`).join('; '));

  // A bad interval is caught before anything is sent.
  let asked = 0;
  page.on('dialog', (d) => { asked++; d.accept(); });
  await page.fill('#edit-0-interval', 'soon');
  await page.click('#edit-save');
  await page.locator('#edit-error', { hasText: 'not a duration' }).waitFor();
  if (asked !== 0) fail('confirmation asked for an invalid edit');

  await page.fill('#edit-0-rate', process.env.NEW_RATE);
  await page.fill('#edit-0-interval', '1h');
  await page.fill('#edit-0-burst', process.env.NEW_RATE);
  const [resp] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'PUT'),
    page.click('#edit-save'),
  ]);
  if (asked !== 1) fail('the edit was not confirmed first');
  if (resp.status() !== 200) fail('PUT answered ' + resp.status() + ' ' + (await resp.text()));
  const version = (await resp.json()).version;
  if (resp.request().headers().cookie) fail('the write carried a cookie');
  await page.locator(`#rules-body tr[data-policy="${policy}"]`, { hasText: process.env.NEW_RATE + '/1h' }).waitFor();
  await page.locator(`#rules-body tr[data-policy="${policy}"] .tag.api`).waitFor();
  // Every instance listed runs the new rules.
  await page.waitForFunction((v) => {
    const cells = [...document.querySelectorAll('#instances-body td[data-rules-version]')];
    return cells.length === 2 && cells.every((c) => c.dataset.rulesVersion === v);
  }, version);
  console.log('edited ' + version);
  const ack = (await lines.next()).value;
  if (ack !== 'followed') fail('expected "followed", got ' + ack);

  // Reverting brings the file's rule back.
  await page.locator(`#rules-body tr[data-policy="${policy}"] button`, { hasText: 'Revert' }).click();
  await page.locator(`#rules-body tr[data-policy="${policy}"] .tag.file`).waitFor();
  if (asked !== 2) fail('the revert was not confirmed first');
  console.log('reverted to the file rule');
}

// instanceLeaves: the Go test stops instance B; it leaves the list.
async function instanceLeaves(page) {
  console.log('stop b');
  const stopped = (await lines.next()).value;
  if (stopped !== 'stopped') fail('expected "stopped", got ' + stopped);
  await page.waitForFunction(() => document.querySelectorAll('#instances-body tr[data-instance]').length === 1, null, { timeout: 60000 });
  console.log('the stopped instance left the list');
}

const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM_PATH,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1366, height: 768 },
  bypassCSP: true, // to inject axe-core; the page itself runs under its CSP otherwise
  timeout: 60000,
});
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  page.setDefaultTimeout(30000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // A 404 of an API not on this server yet is a console error the page handles.
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text()); });
  // Only the server under test: nothing else is fetched.
  const origin = new URL(url).origin;
  await page.route('**/*', (route) => (route.request().url().startsWith(origin) ? route.continue() : fail('fetched ' + route.request().url())));

  await page.goto(url);
  await page.locator('#rules-body tr[data-policy="edge/remote_address"]').waitFor();
  const instances = Number(process.env.EXPECT_INSTANCES || 0);
  if (instances > 0) {
    await page.waitForFunction((n) => document.querySelectorAll('#instances-body tr[data-instance]').length === n, instances);
  } else {
    await page.locator('#instances-body', { hasText: 'no instance registry' }).waitFor();
  }
  await page.locator('#stream-state', { hasText: 'Live' }).waitFor();
  console.log('ready');

  const sent = (await lines.next()).value || fail('no "sent" line');
  const n = Number(sent.replace(/^sent /, ''));
  // The traffic comes over the stream: the page was loaded before it was sent.
  await page.waitForFunction((n) => {
    const row = document.querySelector('#traffic-body tr[data-policy="edge/remote_address"]');
    return row && Number(row.querySelector('.granted').textContent) + Number(row.querySelector('.refused').textContent) === n;
  }, n);
  const row = page.locator('#traffic-body tr[data-policy="edge/remote_address"]');
  console.log('traffic', await row.locator('.granted').textContent(), 'granted', await row.locator('.refused').textContent(), 'refused');

  await page.selectOption('#hot-policy', 'edge/remote_address');
  await page.locator('#hot-body td code').first().waitFor();
  console.log('hottest', (await page.locator('#hot-body tr').first().innerText()).replace(/\s+/g, ' '));

  // The Redisson limiter the Go test made is listed.
  await page.locator('#redisson-body tr', { hasText: 'orders' }).waitFor();
  console.log('redisson', (await page.locator('#redisson-body tr', { hasText: 'orders' }).innerText()).replace(/\s+/g, ' '));

  // Accessibility: no serious or critical violation.
  await page.addScriptTag({ content: axeSource });
  const result = await page.evaluate(() => window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  if (bad.length) fail('axe-core: ' + bad.map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.map((x) => x.target.join(' ')).join(', ')})`).join('; '));
  console.log('axe', result.violations.length, 'minor/moderate violations,', result.passes.length, 'rules passed');

  // Usable at 1366x768: no horizontal scrolling.
  const widths = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
  if (widths[0] > widths[1]) fail(`horizontal scroll at 1366x768: content ${widths[0]}px wide in ${widths[1]}px`);

  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });

  // Keyboard: the skip link is the first stop and moves to the content.
  await page.keyboard.press('Tab');
  if ((await page.evaluate(() => document.activeElement.className)) !== 'skip') fail('the first Tab stop is not the skip link');

  if (process.env.EDIT === '1') {
    // One key's state, in words.
    await page.fill('#inspect-domain', 'edge');
    await page.fill('#inspect-descriptor', 'remote_address=10.1.2.3');
    await page.click('#inspect-form button[type="submit"]');
    await page.locator('#inspect-out p', { hasText: '0 of 4 left' }).waitFor();
    console.log('inspect', await page.locator('#inspect-out p').innerText());
    await editAndFollow(page);
  }
  if (process.env.LEAVE === '1') await instanceLeaves(page);

  if (errors.length) fail('page errors: ' + errors.join('; '));
  console.log('ok');
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(0);
