import { mkdirSync } from 'node:fs';
import { type Browser, chromium, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer, type Listening } from '../src/index.js';
import { useTestDb } from './helpers.js';
import { CHROMIUM, chromiumPresent, needs } from './services.js';

// The dashboard in real headless Chromium (Debian's `chromium`, installed by .ci/run).
const browserHere = needs(chromiumPresent());
const ARTIFACTS = new URL('../test-artifacts/', import.meta.url).pathname;
const ADMIN = 'dashboard-test-admin-token';
const ZONE = 'Australia/Darwin';

const db = useTestDb(import.meta.url);
let browser: Browser;
let listening: Listening;
let page: Page;
const pageErrors: Error[] = [];

beforeAll(async () => {
  if (!browserHere.available) return;
  mkdirSync(ARTIFACTS, { recursive: true });
  listening = await (await createServer(db.tusk, { adminToken: ADMIN })).listen({ port: 0 });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  // a zone off UTC, and without summer time, so the times shown are known
  page = await browser.newPage({ viewport: { width: 1360, height: 900 }, timezoneId: ZONE });
  page.on('pageerror', (error) => pageErrors.push(error));
});
afterAll(async () => {
  await browser?.close();
  await listening?.close();
});
/** What the tests use of a page's window (the tests are not type-checked with the DOM's types). */
interface BrowserWindow {
  localStorage: { setItem(key: string, value: string): void; removeItem(key: string): void };
}

// each test starts signed in as the admin, whatever ran before it: the token where the
// dashboard keeps it, set from a file of the same origin, so that the test's first visit
// loads the dashboard anew (the sign-in test takes the token away)
beforeEach(async () => {
  if (!browserHere.available) return;
  await page.goto(`${listening.url}/assets/logo.svg`);
  await page.evaluate(
    (token) => (globalThis as unknown as BrowserWindow).localStorage.setItem('tusk.token', token),
    ADMIN,
  );
});

/** A screenshot of the page, or of a part of it, once no toast covers it (a toast hides after 3.5 s). */
async function shot(name: string, part?: Locator) {
  await page.locator('#toast.hidden').waitFor({ state: 'attached', timeout: 5_000 });
  if (part) await part.screenshot({ path: `${ARTIFACTS}${name}.png` });
  else await page.screenshot({ path: `${ARTIFACTS}${name}.png`, fullPage: true });
}

/** The panel titled `title`. */
const panelOf = (title: string) => page.locator('section.panel', { has: page.locator(`h2:text-is("${title}")`) });

/** The number a summary card of the overview shows. */
const card = async (name: string) =>
  Number(((await page.locator(`[data-count="${name}"] .value`).textContent()) ?? '').replace(/,/g, ''));

describe('dashboard', () => {
  it('signs in, shows counts changing while a worker runs, retries a dead job, shows an HTML payload as text', async () => {
    await page.evaluate(() => (globalThis as unknown as BrowserWindow).localStorage.removeItem('tusk.token'));
    await page.goto(`${listening.url}/?refresh=250`);
    await page.getByLabel('token').fill(ADMIN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('[data-count="available"]').waitFor();
    expect(await card('available')).toBe(0);

    await db.tusk.enqueueMany(
      Array.from({ length: 30 }, (_, i) => ({ task: 'work', payload: { i }, tenant: `t${i % 3}` })),
    );
    const hostile = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b>';
    const { id: deadId } = await db.tusk.enqueue('explode', { html: hostile }, { tenant: 't0', maxAttempts: 1 });
    await expect.poll(() => card('available'), { timeout: 5_000 }).toBe(31);
    expect(await card('succeeded')).toBe(0);

    const worker = db.worker({
      tasks: {
        work: async () => {
          await new Promise((r) => setTimeout(r, 40));
          return { ok: true };
        },
        explode: async () => {
          throw new Error('<b>kaboom</b>');
        },
      },
      concurrency: 3,
    });
    await worker.start();
    await expect.poll(() => card('succeeded'), { timeout: 10_000 }).toBe(30);
    expect(await card('available')).toBe(0);
    expect(await card('dead')).toBe(1);
    expect(await card('workers')).toBe(1);
    await page.locator('.chart canvas').first().waitFor();
    await page.screenshot({ path: `${ARTIFACTS}dashboard-overview.png`, fullPage: true });
    await worker.stop();

    // the dead job from the job list, then its page
    await page.goto(`${listening.url}/?refresh=250#/jobs?state=dead`);
    const row = page.locator('tbody tr', { hasText: 'explode' });
    await row.locator(`a[href="#/jobs/${deadId}"]`).click();
    await page.getByRole('heading', { name: `Job ${deadId}` }).waitFor();
    expect(await page.locator('.page-head [data-state]').getAttribute('data-state')).toBe('dead');
    const payload = page.locator('section', { hasText: 'Payload' }).locator('pre');
    expect(await payload.textContent()).toContain(hostile.replaceAll('"', '\\"'));
    expect(await page.locator('.attempts .msg').textContent()).toBe('<b>kaboom</b>');
    expect(await page.locator('main script, main img, main b').count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned)).toBeUndefined();
    await page.screenshot({ path: `${ARTIFACTS}dashboard-dead-job.png`, fullPage: true });

    await page.getByRole('button', { name: 'Retry' }).click();
    await expect
      .poll(() => page.locator('.page-head [data-state]').getAttribute('data-state'), { timeout: 5_000 })
      .toBe('available');
    expect((await db.tusk.getJob(deadId))?.state).toBe('available');
    expect(await page.getByRole('button', { name: 'Retry' }).isDisabled()).toBe(true);
    await page.screenshot({ path: `${ARTIFACTS}dashboard-retried-job.png`, fullPage: true });
    expect(pageErrors).toEqual([]);
  });

  it('every section has its page head (one helper builds them) and runs without a script error', async () => {
    await page.goto(`${listening.url}/?refresh=250`);
    const sections = await page.locator('#nav a').evaluateAll((links) => links.map((a) => a.textContent));
    expect(sections).toEqual(['Overview', 'Jobs', 'Tenants', 'Schedules', 'Tasks', 'Workers']);
    for (const name of sections) {
      await page.locator('#nav a', { hasText: name as string }).click();
      await page.locator('.page-head h1', { hasText: name as string }).waitFor();
      expect(await page.locator('main .page-head').count()).toBe(1);
      await expect.poll(() => page.locator('#live').getAttribute('class'), { timeout: 5_000 }).toBe('live ok');
    }
    // the type-checking files are not served
    for (const file of ['types.d.ts', 'tsconfig.json']) {
      expect((await fetch(`${listening.url}/assets/${file}`)).status).toBe(404);
    }
    expect(pageErrors).toEqual([]);
  });

  it('every absolute time says its zone: dates, hover titles, the live clock, the charts', async () => {
    const { id } = await db.tusk.enqueue('later', {}, { runAt: new Date('2030-01-01T09:00:00Z'), tenant: 'zones' });
    await page.goto(`${listening.url}/?refresh=250#/jobs/${id}`);
    await page.getByRole('heading', { name: `Job ${id}` }).waitFor();
    const fact = (name: string) => page.locator('.fact', { hasText: name }).locator('.v');
    expect(await fact('Runs at').textContent()).toBe('2030-01-01 18:30:00 UTC+9:30');
    expect(await fact('Created').locator('span').getAttribute('title')).toMatch(
      /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\+9:30$/,
    );
    expect(await fact('Created').locator('time').getAttribute('title')).toMatch(/ UTC\+9:30 \(Australia\/Darwin\)$/);
    await expect.poll(() => page.locator('#live-text').textContent()).toMatch(/^live · \d\d:\d\d:\d\d UTC\+9:30$/);
    await page.screenshot({ path: `${ARTIFACTS}dashboard-job-times.png`, fullPage: true });

    await page.goto(`${listening.url}/?refresh=250#/`);
    const chart = page.locator('section', { hasText: 'Jobs per minute' });
    expect(await chart.locator('h2').textContent()).toBe('Jobs per minute · times in UTC+9:30 (Australia/Darwin)');
    await chart.locator('.u-over').hover();
    await expect
      .poll(() => chart.locator('.u-legend .u-series').first().locator('.u-value').textContent())
      .toMatch(/^\d\d:\d\d UTC\+9:30$/);
    await chart.screenshot({ path: `${ARTIFACTS}dashboard-chart-zone.png` });
    await db.tusk.cancel(id);
    expect(pageErrors).toEqual([]);
  });

  it('pauses and resumes a queue from the overview, for every worker; a paused queue without jobs is listed', async () => {
    await db.tusk.enqueue('send', {}, { queue: 'mail', tenant: 'queues' });
    await db.tusk.queues.pause('idle');
    await page.goto(`${listening.url}/?refresh=250#/`);
    const row = (queue: string) =>
      panelOf('Queues').locator('tbody tr', { has: page.locator(`a:text-is("${queue}")`) });
    await row('mail').waitFor();
    expect(await row('idle').locator('[data-paused="idle"]').textContent()).toBe('paused');
    expect(await row('mail').locator('[data-paused]').count()).toBe(0);

    await row('mail').getByRole('button', { name: 'Pause' }).click();
    await row('mail').locator('[data-paused="mail"]').waitFor();
    expect((await db.tusk.queues.paused()).map((q) => q.queue)).toEqual(['idle', 'mail']);
    expect(await page.locator('#toast').textContent()).toBe('Queue mail paused: no new claims');
    await shot('dashboard-queues', panelOf('Queues'));

    // resumed: a worker of that queue runs its job
    const ran: string[] = [];
    const worker = db.worker({ tasks: { send: () => void ran.push('send') }, queues: ['mail'] });
    await worker.start();
    await row('mail').getByRole('button', { name: 'Resume' }).click();
    await expect
      .poll(() => db.tusk.queues.paused(), { timeout: 10_000 })
      .toEqual([expect.objectContaining({ queue: 'idle' })]);
    await expect.poll(() => row('mail').locator('[data-paused]').count(), { timeout: 10_000 }).toBe(0);
    await expect.poll(() => ran, { timeout: 10_000 }).toEqual(['send']);
    await worker.stop();
    await db.tusk.queues.resume('idle');
    expect(pageErrors).toEqual([]);
  });

  it('the overview breaks jobs down by task, each count a link to those jobs', async () => {
    const { ids } = await db.tusk.enqueueMany([
      ...Array.from({ length: 3 }, () => ({ task: 'resize_image', tenant: 'bytask', queue: 'bytask' })),
      { task: 'send_digest', tenant: 'bytask', queue: 'bytask', delayMs: 3_600_000 },
    ]);
    await page.goto(`${listening.url}/?refresh=250#/`);
    const row = (task: string) => panelOf('Tasks').locator('tbody tr', { has: page.locator(`[data-task="${task}"]`) });
    await row('resize_image').waitFor();
    // task, then scheduled, waiting, running, retrying, succeeded, dead, cancelled, expired
    expect((await row('resize_image').locator('td').allInnerTexts()).slice(0, 9)).toEqual([
      'resize_image',
      '0',
      '3',
      '0',
      '0',
      '0',
      '0',
      '0',
      '0',
    ]);
    expect((await row('send_digest').locator('td').allInnerTexts()).slice(0, 3)).toEqual(['send_digest', '1', '0']);
    await shot('dashboard-by-task', panelOf('Tasks'));
    await row('resize_image').getByRole('link', { name: '3' }).click();
    await expect.poll(() => page.locator('main tbody tr').count(), { timeout: 5_000 }).toBe(3);
    expect(page.url()).toMatch(/#\/jobs\?task=resize_image&state=available$/);
    await Promise.all(ids.map((id) => db.tusk.cancel(id)));
    expect(pageErrors).toEqual([]);
  });

  it('the job list: filters from known names and a time range; selected jobs retried, cancelled and deleted together', async () => {
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 4 }, (_, i) => ({
        task: 'bulk_task',
        tenant: 'bulk',
        queue: 'bulkq',
        payload: { i },
        maxAttempts: i < 2 ? 1 : 5,
      })),
    );
    const [a, b, c, d] = ids as [string, string, string, string];
    // two dead, two waiting; one of the waiting created long ago
    await db.rows(`UPDATE $schema.jobs SET created_at = '2020-01-01T00:00:00Z' WHERE id = $1`, [d]);
    for (const lease of await db.tusk.fetch({ tenant: 'bulk', queue: 'bulkq', count: 2 })) {
      expect([a, b]).toContain(lease.id);
      await db.tusk.nack(lease, { error: 'gave up' });
    }
    expect((await Promise.all(ids.map((id) => db.tusk.getJob(id)))).map((j) => j?.state)).toEqual([
      'dead',
      'dead',
      'available',
      'available',
    ]);

    await page.goto(`${listening.url}/?refresh=250#/jobs`);
    const form = page.locator('form.filters');
    // the names to choose from: what the server knows
    await expect
      .poll(() => page.locator('#known-tasks option').evaluateAll((o) => o.map((x) => x.getAttribute('value'))), {
        timeout: 5_000,
      })
      .toContain('bulk_task');
    expect(await page.locator('#known-tenants option[value="bulk"]').count()).toBe(1);
    expect(await page.locator('#known-queues option[value="bulkq"]').count()).toBe(1);
    await form.getByLabel('task').fill('bulk_task');
    await form.getByLabel('tenant').fill('bulk');
    await form.getByLabel('created from (UTC+9:30)').fill('2020-01-01T09:00'); // 2019-12-31T23:30Z
    await form.getByLabel('to (UTC+9:30)').fill('2020-01-01T10:00'); // 00:30Z
    await form.getByRole('button', { name: 'Filter' }).click();
    await expect
      .poll(() => page.url(), { timeout: 5_000 })
      .toContain('from=2019-12-31T23%3A30%3A00.000Z&to=2020-01-01T00%3A30%3A00.000Z');
    const idsShown = () => page.locator('main tbody tr td:nth-child(2)').allInnerTexts();
    await expect.poll(idsShown, { timeout: 5_000 }).toEqual([d]);

    await page.goto(`${listening.url}/?refresh=250#/jobs?task=bulk_task&tenant=bulk`);
    await expect.poll(idsShown, { timeout: 5_000 }).toEqual([d, c, b, a]);
    expect(await form.getByLabel('task').inputValue()).toBe('bulk_task');
    const box = (id: string) => page.getByLabel(`select job ${id}`);
    await page.getByLabel('select every job on this page').check();
    expect(await page.locator('.bulk > span').textContent()).toBe('4 jobs selected');
    await box(d).uncheck();
    expect(await page.locator('.bulk > span').textContent()).toBe('3 jobs selected');
    await shot('dashboard-jobs-selected');

    // retry: the dead ones go back; the waiting one is left, and said so
    await page.getByRole('button', { name: 'Retry selected' }).click();
    await expect
      .poll(() => page.locator('#toast').textContent(), { timeout: 5_000 })
      .toBe('2 jobs queued again; 1 left as not retryable in its state');
    expect((await Promise.all(ids.map((id) => db.tusk.getJob(id)))).map((j) => j?.state)).toEqual([
      'available',
      'available',
      'available',
      'available',
    ]);
    await expect.poll(() => page.locator('input[data-job]:checked').count(), { timeout: 5_000 }).toBe(0);

    // cancel two. The list's answers come back late from here on, so that the rows stay on
    // the page a while after the action: the boxes just used must read unchecked meanwhile
    // (they read checked until the refresh returned, and the delete below, checking one of
    // them again, clicked nothing and deleted 1 job of 2)
    const listLate = (url: URL) => url.pathname.endsWith('/api/jobs');
    await page.route(listLate, async (route) => {
      if (route.request().method() !== 'GET') return route.fallback();
      const response = await route.fetch();
      await new Promise((resolve) => setTimeout(resolve, 700));
      // a list the page dropped meanwhile (it left the view, or the test ended) is not answered
      return route.fulfill({ response }).catch(() => {});
    });
    await box(a).check();
    await box(c).check();
    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Cancel selected' }).click();
    await expect.poll(() => page.locator('#toast').textContent(), { timeout: 5_000 }).toBe('2 jobs cancelled');
    expect(await page.locator('input[data-job]:checked').count()).toBe(0);
    expect((await Promise.all(ids.map((id) => db.tusk.getJob(id)))).map((j) => j?.state)).toEqual([
      'cancelled',
      'available',
      'cancelled',
      'available',
    ]);

    // delete two: a finished one and a waiting one, records and all. Their answers come
    // back late, so that a redraw (every 250 ms) runs once they are gone: it drops them
    // from the selection, and the count of running ones left read it after (-2 running).
    await page.route('**/api/jobs/*', async (route) => {
      if (route.request().method() !== 'DELETE') return route.fallback();
      const response = await route.fetch();
      await new Promise((resolve) => setTimeout(resolve, 700));
      return route.fulfill({ response });
    });
    await box(a).check();
    await box(b).check();
    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Delete selected' }).click();
    await expect.poll(() => page.locator('#toast').textContent(), { timeout: 5_000 }).toBe('2 jobs deleted');
    await page.unroute('**/api/jobs/*');
    await page.unroute(listLate);
    expect((await Promise.all(ids.map((id) => db.tusk.getJob(id)))).map((j) => j?.state ?? null)).toEqual([
      null,
      null,
      'cancelled',
      'available',
    ]);
    await Promise.all(ids.map((id) => db.tusk.cancel(id)));
    expect(pageErrors).toEqual([]);
  });

  it('the schedules page lists each schedule with its zone, next and last tick and last job; pauses, resumes and removes one', async () => {
    await db.tusk.schedules.set('nightly-report', '0 3 * * *', { task: 'report', tenant: 'acme', tz: 'Europe/Paris' });
    await db.tusk.schedules.set('heartbeat', '* * * * * *', { task: 'ping', queue: 'cron' });
    await db.tusk.upkeep().runOnce(); // enqueues the ticks due soon
    const heartbeat = await db.tusk.schedules.get('heartbeat');
    const nightly = await db.tusk.schedules.get('nightly-report');
    await page.goto(`${listening.url}/?refresh=250#/schedules`);
    const row = (name: string) => page.locator('tbody tr', { has: page.locator(`[data-schedule="${name}"]`) });
    await row('nightly-report').waitFor();
    const cells = await row('nightly-report').locator('td').allInnerTexts();
    expect(cells.slice(0, 6)).toEqual(['nightly-report', '0 3 * * *', 'Europe/Paris', 'report', 'acme', 'default']);
    // the next 3 o'clock in Paris, shown in the browser's zone
    const next = new Date(nightly?.nextRunAt ?? 0);
    const local = new Intl.DateTimeFormat('sv-SE', { timeZone: ZONE, dateStyle: 'short', timeStyle: 'medium' });
    // the time, then how far it is (a line break between them once laid out)
    expect(cells[6]).toMatch(new RegExp(`^${local.format(next)} UTC\\+9:30\\n?in `));
    expect(cells.slice(7, 9)).toEqual(['not yet', '—']);
    const lastJob = row('heartbeat').locator(`a[href="#/jobs/${heartbeat?.lastJobId}"]`);
    expect(await lastJob.textContent()).toBe(heartbeat?.lastJobId);
    await shot('dashboard-schedules');

    // paused: no tick enqueued, the ticks enqueued ahead cancelled; resumed at its next tick
    await row('heartbeat').getByRole('button', { name: 'Pause' }).click();
    await row('heartbeat').getByRole('button', { name: 'Resume' }).waitFor();
    expect((await db.tusk.schedules.get('heartbeat'))?.pausedAt).toBeInstanceOf(Date);
    expect((await db.tusk.getJob(heartbeat?.lastJobId ?? '0'))?.state).toBe('cancelled');
    expect(await row('heartbeat').locator('td').nth(6).innerText()).toBe('paused');
    await row('heartbeat').getByRole('button', { name: 'Resume' }).click();
    await row('heartbeat').getByRole('button', { name: 'Pause' }).waitFor();
    expect((await db.tusk.schedules.get('heartbeat'))?.pausedAt).toBeNull();

    page.once('dialog', (dialog) => void dialog.accept());
    await row('heartbeat').getByRole('button', { name: 'Remove' }).click();
    await expect.poll(() => row('heartbeat').count(), { timeout: 5_000 }).toBe(0);
    expect(await db.tusk.schedules.get('heartbeat')).toBeNull();
    expect((await db.tusk.getJob(heartbeat?.lastJobId ?? '0'))?.state).toBe('cancelled');
    await row('nightly-report').getByRole('link', { name: 'acme' }).click();
    await page.getByRole('heading', { name: 'Jobs' }).waitFor();
    expect(page.url()).toMatch(/#\/jobs\?tenant=acme$/);
    await db.tusk.schedules.remove('nightly-report');
    expect(pageErrors).toEqual([]);
  });

  it('the tenants page shows rate limits, retention and why jobs wait; edits them', async () => {
    // the day's one start, used below, is read back within the same day
    await db.roomInWindow(86_400_000, 15_000);
    await db.tusk.tenants.set('metered', { rate: { limit: 1, perMs: 86_400_000 }, retention: '30 days' });
    await db.tusk.tenants.set('narrow', { slots: 1 });
    const { ids } = await db.tusk.enqueueMany(
      ['metered', 'metered', 'narrow', 'narrow'].map((tenant) => ({ task: 'w', tenant, queue: 'why' })),
    );
    // one start each: the metered tenant's rate and the narrow tenant's slot are used up
    for (const tenant of ['metered', 'narrow'])
      expect(await db.tusk.fetch({ tenant, queue: 'why', count: 2 })).toHaveLength(1);
    const metered = await db.tusk.tenants.get('metered');

    await page.goto(`${listening.url}/?refresh=250#/tenants`);
    const row = (tenant: string) => page.locator('tbody tr', { has: page.locator(`[data-tenant="${tenant}"]`) });
    const cells = async (tenant: string) => (await row(tenant).locator('td').allInnerTexts()).slice(0, 11);
    await row('metered').waitFor();
    const resets = new Intl.DateTimeFormat('en-GB', { timeZone: ZONE, timeStyle: 'medium' }).format(
      metered?.rateResetsAt ?? 0,
    );
    // polled: the page redraws its rows every 250 ms, and a cell read from a row just
    // replaced is detached, its text without the line breaks of its layout
    await expect
      .poll(() => cells('metered'), { timeout: 5_000 })
      .toEqual([
        'metered',
        '∞\ndefault',
        '—',
        '1 / day',
        '30 days',
        '1',
        '1',
        '0',
        '0',
        expect.stringMatching(/ (ms|s)$/),
        `rate limited until ${resets} UTC+9:30 (1 / day)`,
      ]);
    await expect
      .poll(async () => (await cells('narrow')).slice(1, 5), { timeout: 5_000 })
      .toEqual(['1', '—', '—', 'forever\ndefault']);
    await expect.poll(async () => (await cells('narrow'))[10], { timeout: 5_000 }).toBe('slots full (1 of 1)');
    await shot('dashboard-tenants');

    await row('narrow').getByRole('button', { name: 'Edit' }).click();
    const editor = panelOf('Tenant narrow');
    await editor.getByLabel('slots').fill('3');
    await editor.getByLabel('rate limit').fill('100');
    await editor.getByLabel('rate window').selectOption({ label: 'per minute' });
    await editor.getByLabel('retention').fill('90 days');
    await page.screenshot({ path: `${ARTIFACTS}dashboard-tenant-edit.png`, fullPage: true });
    await editor.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => panelOf('Tenant narrow').count()).toBe(0);
    expect(await db.tusk.tenants.get('narrow')).toMatchObject({
      slots: 3,
      rate: { limit: 100, perMs: 60_000 },
      retention: '90 days',
    });
    // a slot free and starts left: its waiting job waits for a worker now
    await expect
      .poll(() => cells('narrow'), { timeout: 5_000 })
      .toEqual([
        'narrow',
        '3',
        '—',
        '100 / min',
        '90 days',
        '1',
        '1',
        '0',
        '0',
        expect.stringMatching(/ (ms|s)$/),
        'waiting for a worker',
      ]);
    await Promise.all(ids.map((id) => db.tusk.cancel(id)));
    expect(pageErrors).toEqual([]);
  });

  it('the tasks page lists the definitions workers recorded, with the payload JSON Schema to unfold', async () => {
    const worker = db.worker({
      tasks: {
        send_email: {
          queue: 'mail',
          retry: { maxAttempts: 2, backoff: 250 },
          schema: z.object({ to: z.email() }),
          handler: () => {},
        },
        plain: () => {},
      },
      name: 'mailer',
    });
    await worker.start();
    await worker.stop();
    await page.goto(`${listening.url}/?refresh=250#/tasks`);
    await page.getByRole('heading', { name: 'Tasks' }).waitFor();
    const row = page.locator('tbody tr', { has: page.locator('[data-task="send_email"]') });
    await row.waitFor();
    // as shown, the schema folded; polled: a cell of a row the 250 ms redraw just replaced
    // is detached, and its text is then all of it, the folded schema too
    await expect
      .poll(async () => (await row.locator('td').allInnerTexts()).slice(0, 8), { timeout: 5_000 })
      .toEqual(['send_email', 'default', 'mail', '2', '250 ms', '900 s', 'JSON Schema', 'mailer']);
    await row.getByText('JSON Schema').click();
    expect(JSON.parse((await row.locator('pre').textContent()) ?? '')).toMatchObject({
      properties: { to: { format: 'email' } },
      required: ['to'],
    });
    const plain = await page
      .locator('tbody tr', { has: page.locator('[data-task="plain"]') })
      .locator('td')
      .allTextContents();
    expect(plain.slice(0, 7)).toEqual(['plain', 'default', 'default', 'default', 'exponential', '900 s', 'none']);
    await page.screenshot({ path: `${ARTIFACTS}dashboard-tasks.png`, fullPage: true });
    expect(pageErrors).toEqual([]);
  });

  it('live from the event stream: a job page shows the progress and the end of its job without waiting for a poll', async () => {
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const worker = db.worker({
      queues: ['live'],
      heartbeatMs: 50,
      tasks: {
        report: async (_p: unknown, ctx) => {
          ctx.progress({ done: 3, of: 4 });
          await released;
          return { pages: 4 };
        },
      },
    });
    const { id } = await db.tusk.enqueue('report', null, { queue: 'live' });
    // polls a minute apart: only the stream can bring the changes within the test's bounds
    await page.goto(`${listening.url}/?refresh=60000#/jobs/${id}`);
    await page.getByRole('heading', { name: `Job ${id}` }).waitFor();
    const state = () => page.locator('.page-head [data-state]').getAttribute('data-state');
    expect(await state()).toBe('available');
    await worker.start();
    await expect.poll(() => page.locator('main').textContent(), { timeout: 10_000 }).toContain('"of": 4');
    release();
    await expect.poll(state, { timeout: 10_000 }).toBe('succeeded');
    await worker.stop();
    expect(pageErrors).toEqual([]);
  });

  it('a job that does not exist: the page says so, what may have happened and where to go; updates stay on', async () => {
    for (const id of ['987654321', 'abc']) {
      await page.goto(`${listening.url}/?refresh=250#/jobs/${id}`);
      await page.getByRole('heading', { name: `No job ${id}` }).waitFor();
      const text = await page.locator('main').textContent();
      expect(text).toContain(`There is no job with id ${id} that this token may see.`);
      expect(text).toContain('retention');
      await expect.poll(() => page.locator('#live').getAttribute('class'), { timeout: 5_000 }).toBe('live ok');
    }
    await page.screenshot({ path: `${ARTIFACTS}dashboard-no-job.png`, fullPage: true });
    expect(pageErrors).toEqual([]);
  });

  it('a server that stops answering: the page says so and what to do, and carries on when it is back', async () => {
    const server = await createServer(db.tusk, { adminToken: ADMIN });
    let other = await server.listen({ port: 0 });
    const port = Number(new URL(other.url).port);
    const tab = await browser.newPage();
    try {
      // signed in, then the server stops
      await tab.goto(`${other.url}/?refresh=250`);
      await tab.getByLabel('token').fill(ADMIN);
      await tab.getByRole('button', { name: 'Sign in' }).click();
      await tab.locator('[data-count="available"]').waitFor();
      await other.close();
      await expect
        .poll(() => tab.locator('#live-text').textContent(), { timeout: 10_000 })
        .toBe('server unreachable · retrying');
      expect(await tab.locator('#toast').textContent()).toMatch(
        /^Cannot reach the Tusk server at 127\.0\.0\.1:\d+: it has stopped, or the network is down\. Start it again/,
      );

      // the sign-in screen, then the server stops before the token is sent
      other = await server.listen({ port });
      await tab.getByRole('button', { name: 'Sign out' }).click();
      await tab.getByLabel('token').waitFor();
      await other.close();
      await tab.getByLabel('token').fill(ADMIN);
      await tab.getByRole('button', { name: 'Sign in' }).click();
      await tab.getByRole('heading', { name: 'The server does not answer' }).waitFor();
      expect(await tab.locator('#live-text').textContent()).toBe('server unreachable · retrying');
      await tab.screenshot({ path: `${ARTIFACTS}dashboard-unreachable.png`, fullPage: true });

      // back: the page gets there by itself
      other = await server.listen({ port });
      await tab.locator('[data-count="available"]').waitFor({ timeout: 10_000 });
      await expect.poll(() => tab.locator('#live').getAttribute('class'), { timeout: 5_000 }).toBe('live ok');
    } finally {
      await tab.close();
      await other.close().catch(() => {});
    }
  });
});
