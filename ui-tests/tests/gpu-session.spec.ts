/**
 * The GPU session UI in a real JupyterLab page on Debian's Chromium:
 * - the whole cycle: build a torch model in a notebook, press Pause, see the
 *   paused state with the kernel gone, press Resume, and run a cell in the same
 *   open notebook that uses the restored model and variables;
 * - the checkpoint panel: checkpoint now, restore into the running kernel, delete.
 * With GKEWS_SCREENSHOTS=1 (make screenshots) it saves docs/img/paused.png and resumed.png.
 */
import { expect, test } from '@jupyterlab/galata';
import type { Page } from '@playwright/test';
import * as path from 'path';

import {
  newNotebook,
  notification,
  panelKernel,
  serverKernels,
  serverSessions,
  shutDownEverything,
  statusItem
} from './helpers';

const SETUP = `import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
x = torch.linspace(-1, 1, 24).reshape(3, 8)
history = [0.5, 0.25, 0.125]
gen = (i for i in range(3))
print(f"before {model(x).sum().item():.6f} {sum(history)}")`;

const CHECK = `print(f"after {model(x).sum().item():.6f} {sum(history)}")`;

const SCREENSHOTS = process.env.GKEWS_SCREENSHOTS === '1';
const IMG = path.resolve(__dirname, '..', '..', 'docs', 'img');

async function screenshot(page: Page, name: string): Promise<void> {
  if (SCREENSHOTS) {
    await page.screenshot({ path: path.join(IMG, name) });
  }
}

/**
 * Open a new notebook of `cells`, run the first, checkpoint it: its section of the sidebar, with the
 * automatic-checkpoint toggle enabled.
 */
async function checkpointedInSidebar(page: Page, notebook: string, cells: string[]) {
  await page.contents.uploadContent(JSON.stringify(newNotebook(cells)), 'text', notebook);
  await page.notebook.openByPath(notebook);
  await page.notebook.activate(path.basename(notebook));
  await page.notebook.runCell(0);
  await page.menu.clickMenuItem('Kernel>Checkpoint the current notebook now');
  const panel = page.getByRole('region', { name: 'GPU session checkpoints' });
  const section = panel.locator('section', { has: page.getByRole('heading', { name: notebook }) });
  const toggle = section.getByRole('checkbox', { name: 'Checkpoint after every cell' });
  await expect(toggle).toBeEnabled();
  return { panel, section, toggle };
}

test.use({ autoGoto: true, viewport: { width: 1280, height: 720 } });

test.afterEach(async ({ request }) => shutDownEverything(request));

test('pause releases the kernel and resume brings the model back into the open notebook', async ({ page, tmpPath }) => {
  const status = page.locator('.jp-gkews-StatusItem');
  // the server is shared by the tests: "ready" when an earlier one (--repeat-each) ended with a resume
  await expect(status).toHaveText(/^GPU session: (active|ready)$/);
  await expect(status).toHaveAttribute('aria-label', /Show the details/);

  const notebook = `${tmpPath}/train.ipynb`;
  await page.contents.uploadContent(JSON.stringify(newNotebook([SETUP, CHECK])), 'text', notebook);
  await page.notebook.openByPath(notebook);
  await page.notebook.activate('train.ipynb');
  await page.notebook.runCell(0);
  const before = (await page.notebook.getCellTextOutput(0))?.join('') ?? '';
  expect(before).toMatch(/^before -?\d+\.\d{6} 0\.875/);
  const [kernelBefore] = await serverKernels(page);
  expect((await panelKernel(page)).id).toBe(kernelBefore);

  // the toolbar button: a labelled Pause with a tooltip
  const pause = page.getByRole('button', { name: /^Pause:/ });
  await expect(pause).toHaveAttribute('title', /Pause the GPU session/);
  await pause.click();

  await expect(status).toHaveText('GPU session: paused', { timeout: 120_000 });
  await expect(notification(page, 'Paused train.ipynb; Resume brings its kernel back.')).toBeVisible();
  // the kernel is gone from the server (the page may not have noticed yet: Resume does not wait for it)
  expect(await serverKernels(page)).toEqual([]);
  const resume = page.getByRole('button', { name: /^Resume:/ });
  await expect(resume).toBeEnabled();
  await screenshot(page, 'paused.png');

  await resume.click();
  await expect(status).toHaveText('GPU session: ready', { timeout: 180_000 });
  const toast = notification(page, 'Resumed train.ipynb from its checkpoint');
  await expect(toast).toContainText('variables restored');
  await expect(toast).toContainText('gen (a generator, re-run cell 1) was not saved.');

  // the open panel is attached to the restored kernel (same id), and no other kernel was started
  await expect.poll(() => panelKernel(page)).toEqual({ id: kernelBefore, connection: 'connected' });
  expect(await serverKernels(page)).toEqual([kernelBefore]);

  await page.notebook.runCell(1);
  const after = (await page.notebook.getCellTextOutput(1))?.join('') ?? '';
  expect(after.replace('after', 'before')).toBe(before);
  await expect(page.getByRole('button', { name: /^Pause:/ })).toBeEnabled();
  await screenshot(page, 'resumed.png');

  // the details dialog: timeline from the pause request to the kernel being usable, and the verdict
  await status.click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('pause requested');
  await expect(dialog).toContainText('first cell ran (kernel usable)');
  await expect(dialog).toContainText(notebook);
  await expect(dialog).toContainText('gen was not saved');
  await dialog.getByRole('button', { name: /Close/ }).click();
});

test('checkpoint now, restore it into the running kernel after a confirmation, then delete it', async ({
  page,
  tmpPath
}) => {
  const notebook = `${tmpPath}/weights.ipynb`;
  const cells = ['weights = [1, 2, 3]', 'weights.append(4)\nprint(weights)', 'print(weights)'];
  await page.contents.uploadContent(JSON.stringify(newNotebook(cells)), 'text', notebook);
  await page.notebook.openByPath(notebook);
  await page.notebook.activate('weights.ipynb');
  await page.notebook.runCell(0);

  await page.menu.clickMenuItem('Kernel>Checkpoint the current notebook now');
  const panel = page.getByRole('region', { name: 'GPU session checkpoints' });
  const item = panel.getByRole('list', { name: `Checkpoints of ${notebook}` }).locator('.jp-gkews-Checkpoint');
  await expect(item).toHaveCount(1);
  await expect(item).toContainText('1 variable · 0 skipped');

  await page.notebook.runCell(1);
  expect((await page.notebook.getCellTextOutput(1))?.join('')).toBe('[1, 2, 3, 4]\n');

  // a double click, as many click buttons: its second click lands where the dialog now is, and must not
  // dismiss it (JupyterLab's backdrop cancels a dialog on a click)
  await item.getByRole('button', { name: /^Restore checkpoint/ }).dblclick();
  // and a second click that reached the button itself, as a quick double click's may: one dialog, not two
  await item.getByRole('button', { name: /^Restore checkpoint/ }).dispatchEvent('click');
  await expect(page.locator('.jp-Dialog')).toHaveCount(1);
  await expect(page.locator('.jp-Dialog')).toContainText('Restore this checkpoint?');
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Restore' }).click();
  await expect(notification(page, `Restored 1 variable into ${notebook}`)).toBeVisible();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0); // the double click asked once, not twice
  await page.notebook.runCell(2);
  expect((await page.notebook.getCellTextOutput(2))?.join('')).toBe('[1, 2, 3]\n');

  await item.getByRole('button', { name: /^Delete checkpoint/ }).dblclick();
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Delete' }).click();
  await expect(item).toHaveCount(0);
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
});

// The page sees the server's own sessions, not only those it created (Galata's mock of the sessions API
// hides the one the resume restores, so that the page would have made a second one of its own).
test.describe('with the real sessions API', () => {
  test.use({ sessions: null as any, kernels: null as any });

  test('a page reloaded while paused starts no kernel of its own, and resume attaches the restored one', async ({
    page,
    tmpPath
  }) => {
    const notebook = `${tmpPath}/reload.ipynb`;
    const cells = ['import torch\nw = torch.arange(6.0)', 'print(w.sum().item())'];
    await page.contents.uploadContent(JSON.stringify(newNotebook(cells)), 'text', notebook);
    await page.notebook.openByPath(notebook);
    await page.notebook.activate('reload.ipynb');
    await page.notebook.runCell(0);
    const [kernelBefore] = await serverKernels(page);
    const sessionsBefore = await serverSessions(page);

    const status = page.locator('.jp-gkews-StatusItem');
    await page.getByRole('button', { name: /^Pause:/ }).click();
    await expect(status).toHaveText('GPU session: paused', { timeout: 120_000 });

    // (Galata's own wait is for a Launcher tab, and this page restores only the notebook)
    await page.reload({ waitForIsReady: false });
    await expect(page.getByRole('main').locator('.jp-NotebookPanel')).toBeVisible();
    await expect(status).toHaveText('GPU session: paused');
    // the restored notebook panel has settled (its session context is ready) without a kernel
    await page.waitForFunction(() => {
      const widget = (window as any).jupyterapp.shell.currentWidget;
      return widget?.sessionContext?.isReady && !widget.sessionContext.session;
    });
    expect(await serverKernels(page)).toEqual([]);

    await page.getByRole('button', { name: /^Resume:/ }).click();
    await expect(status).toHaveText('GPU session: ready', { timeout: 180_000 });
    await expect.poll(() => panelKernel(page)).toEqual({ id: kernelBefore, connection: 'connected' });
    await page.notebook.runCell(1);
    expect((await page.notebook.getCellTextOutput(1))?.join('')).toBe('15.0\n');
    expect(await serverKernels(page)).toEqual([kernelBefore]);
    // one session, the notebook's own, back on its kernel: the page made no second one
    expect(await serverSessions(page)).toEqual(sessionsBefore);
  });

  test('kernel undo from the sidebar: a checkpoint after every cell, rewind, and no request that can only be refused', async ({
    page,
    tmpPath
  }) => {
    // a notebook without a running kernel (paused, or closed by an earlier test) cannot say whether its
    // automatic checkpoints are on: the sidebar must not ask (each such question was answered 409)
    // (one sent before Pause was pressed, and answered after the pause began, is the server's to refuse: the
    // page could not know)
    const refused: string[] = [];
    let pausePressed = false;
    const sentAfterPause = new WeakSet<object>();
    page.on('request', r => {
      if (pausePressed) {
        sentAfterPause.add(r);
      }
    });
    page.on('response', async r => {
      if (r.url().includes('/gkews/checkpoints/auto') && r.status() >= 400 && sentAfterPause.has(r.request())) {
        refused.push(`${r.status()} ${r.request().postData()}: ${await r.text().catch(() => '')}`);
      }
    });
    const notebook = `${tmpPath}/undo.ipynb`;
    const { panel, section, toggle } = await checkpointedInSidebar(page, notebook, ['x = 1', 'x = 2', 'print(x)']);
    await expect(toggle).not.toBeChecked();
    await toggle.check();
    await expect(toggle).toBeEnabled();
    await page.notebook.runCell(0); // [2]: x = 1
    await page.notebook.runCell(1); // [3]: x = 2

    // the automatic checkpoints are written in the background: read the list until both are there
    const rewind = section.getByRole('button', { name: /back to the end of cell \[2\]$/ });
    await expect(async () => {
      await panel.getByRole('button', { name: 'Refresh the list of checkpoints' }).click();
      await expect(section.getByRole('button', { name: /back to the end of cell \[3\]$/ })).toBeVisible({
        timeout: 1000
      });
    }).toPass({ timeout: 60_000 });
    await rewind.click();
    await page.locator('.jp-Dialog').getByRole('button', { name: 'Rewind' }).click();
    await expect(notification(page, `Rewound ${notebook} to after cell [2]; changed: x`)).toBeVisible();
    await page.notebook.runCell(2);
    expect((await page.notebook.getCellTextOutput(2))?.join('')).toBe('1\n');

    // paused: the toggle says why it is off, without asking the kernel that is gone
    const status = statusItem(page);
    pausePressed = true;
    await page.getByRole('button', { name: /^Pause:/ }).click();
    await expect(status).toHaveText('GPU session: paused', { timeout: 120_000 });
    await expect(section.locator('.jp-gkews-Checkpoint-auto')).toHaveAttribute('title', /is paused/);
    await expect(toggle).toBeDisabled();
    await page.getByRole('button', { name: /^Resume:/ }).click();
    await expect(status).toHaveText('GPU session: ready', { timeout: 180_000 });
    await expect(toggle).toBeEnabled();
    expect(refused).toEqual([]);
  });

  test('the sidebar toggle of a kernel running a cell comes back once the cell ends', async ({ page, tmpPath }) => {
    const notebook = `${tmpPath}/busy.ipynb`;
    const gated = ['import os, time', 'while not os.path.exists("gate"):', '    time.sleep(0.05)'].join('\n');
    const { panel, section, toggle } = await checkpointedInSidebar(page, notebook, ['x = 1', gated]);

    await page.notebook.runCell(1, { inplace: true, wait: false } as any);
    await expect(page.locator('#jp-main-statusbar')).toContainText('Busy');
    await panel.getByRole('button', { name: 'Refresh the list of checkpoints' }).click();
    await expect(section.locator('.jp-gkews-Checkpoint-auto')).toHaveAttribute('title', /running a cell/);
    await expect(toggle).toBeDisabled();
    // so are Restore and Rewind: the server refuses them until the cell ends (they were on, and failed after)
    const restore = section.locator('.jp-gkews-Checkpoint-action', { hasText: 'Restore' }).first();
    await expect(restore).toBeDisabled();
    await expect(restore).toHaveAttribute('title', /^Not available now: .*running a cell/);
    // the sessions' poll would draw the list again some seconds later: refused here, so that only the
    // toggle's own asking again can bring it back
    await page.route('**/api/sessions**', route => route.abort());
    await page.contents.uploadContent('', 'text', `${tmpPath}/gate`);
    await expect(toggle).toBeEnabled();
    await expect(toggle).not.toBeChecked();
    await expect(restore).toBeEnabled();
    await page.unroute('**/api/sessions**');
  });

  test('Restore is off for a notebook whose kernel is shut down, saying why, and on again once it runs', async ({
    page,
    tmpPath
  }) => {
    // it was on, asked for a confirmation, then failed: "has no running kernel"
    const notebook = `${tmpPath}/stopped.ipynb`;
    const { section } = await checkpointedInSidebar(page, notebook, ['x = 1']);
    const restore = section.locator('.jp-gkews-Checkpoint-action', { hasText: 'Restore' });
    await expect(restore).toBeEnabled();
    await page.menu.clickMenuItem('Kernel>Shut Down Kernel');
    await expect(restore).toBeDisabled();
    await expect(restore).toHaveAttribute(
      'title',
      `${notebook} has no running kernel. Open it and run a cell, then refresh this list.`
    );
    await page.notebook.runCell(0);
    await expect(restore).toBeEnabled();
  });
});

test('while the server does not answer the status says unreachable, and it comes back without a reload', async ({
  page
}) => {
  // The outage is produced in the browser: every request of the extension (its URLs are under
  // gkews/, JupyterLab's own are not) is refused as by a server that is down. A Galata-managed
  // server cannot be restarted from inside a test; the page sees the same failed fetch, and runs the
  // same code path (unreachable state, backoff, reconnect), when a real server restarts.
  const extensionUrls = '**/gkews/**';
  const status = page.getByRole('button', { name: /^GPU session: / });
  await expect(status).toHaveText(/^GPU session: (active|ready)$/);
  const before = await status.textContent();
  await page.evaluate(() => ((window as any).gkewsSamePage = true));

  let refusedStatusReads = 0;
  await page.route(extensionUrls, route => {
    refusedStatusReads += route.request().url().includes('/gkews/status') ? 1 : 0;
    return route.abort('connectionrefused');
  });
  await expect(status).toHaveText('GPU session: server unreachable', { timeout: 30_000 });
  await expect(status).toHaveAttribute('title', /does not answer .*retrying/);
  // it keeps retrying while the server is away (and keeps saying so)
  await expect.poll(() => refusedStatusReads, { timeout: 30_000 }).toBeGreaterThanOrEqual(3);
  await expect(status).toHaveText('GPU session: server unreachable');

  // the reads back off up to 10 s, so the first answer can take that long to be read
  await page.unroute(extensionUrls);
  const toast = notification(page, 'The Jupyter server answers again');
  await expect(toast).toBeVisible({ timeout: 30_000 });
  await expect(toast).toContainText(`the GPU session is ${before!.replace('GPU session: ', '')}`);
  await expect(status).toHaveText(before!, { timeout: 30_000 });
  expect(await page.evaluate(() => (window as any).gkewsSamePage)).toBe(true);
});
