/**
 * "Ready" means the next cell runs, however the user clicks. Each test presses
 * the buttons as soon as the state they wait for is visible (no pause of its
 * own between a state showing and the next click), then types a new cell and
 * reads its output and its prompt number in the page. Run with --repeat-each
 * to shake out the races (docs/ui.md).
 */
import { expect, test } from '@jupyterlab/galata';
import type { Page } from '@playwright/test';

import {
  newNotebook,
  notification,
  savedSources,
  serverKernels,
  shutDownEverything,
  statusItem,
  typeAndRun,
  typeAndSchedule
} from './helpers';

// the server's own sessions API: Galata's mock shows a page only the sessions it created, not the restored ones
test.use({ autoGoto: true, viewport: { width: 1280, height: 720 }, sessions: null as any, kernels: null as any });
test.afterEach(async ({ request }) => shutDownEverything(request));

/**
 * A cell that runs `before`, waits until the test writes the file "gate", then runs `after`. Typed into
 * the editor, which indents the line after a `while ...:`: so no block, one line that polls.
 */
function GATED(after: string, before = ''): string {
  return `import os, time\n${before}[time.sleep(0.05) for _ in iter(lambda: os.path.exists("gate"), True)]\n${after}`;
}

const PAUSED = { timeout: 120_000 };
const READY = { timeout: 180_000 };

/** Upload and open notebooks (each with the cells given: by default one that sets w), and run them in each. */
async function openAndRun(page: Page, tmpPath: string, names: string[], cells = ['w = 41']): Promise<string[]> {
  const paths: string[] = [];
  for (const name of names) {
    const path = `${tmpPath}/${name}`;
    await page.contents.uploadContent(JSON.stringify(newNotebook(cells)), 'text', path);
    // (the command, not the file browser: its listing may lag behind the upload)
    await page.evaluate(async p => {
      await (window as any).jupyterapp.commands.execute('docmanager:open', { path: p });
    }, path);
    await expect(page.getByRole('main').getByRole('tab', { name })).toBeVisible();
    await page.notebook.activate(name);
    for (let i = 0; i < cells.length; i++) {
      await page.notebook.runCell(i, true);
    }
    paths.push(path);
  }
  return paths;
}

function pauseButton(page: Page) {
  return page.getByRole('button', { name: /^Pause:/ });
}

/** The first cell made GATED('w = 41') and run, then Pause pressed while it runs (its dialog opens). */
async function pauseWhileTheGatedCellRuns(page: Page): Promise<void> {
  await page.notebook.setCell(0, 'code', GATED('w = 41'));
  await page.notebook.runCell(0, { inplace: true, wait: false } as any);
  await expect(page.locator('#jp-main-statusbar')).toContainText('Busy');
  await pauseButton(page).click();
}

function resumeButton(page: Page) {
  return page.getByRole('button', { name: /^Resume:/ });
}

test('Resume pressed the instant "paused" shows: the next cell runs as [2]', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['instant.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[2]:'); // the restored kernel continues the notebook's counter
  await expect(notification(page, 'Paused instant.ipynb; Resume brings its kernel back.')).toHaveCount(1);
  await expect(notification(page, 'Resumed instant.ipynb from its checkpoint: 1 variable restored.')).toHaveCount(1);
});

test('the kernel indicator says Idle once ready, not Unknown', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['indicator.ipynb']);
  // what JupyterLab's kernel indicators (toolbar and status bar) show, read at the instant asked
  const indicator = () =>
    page.evaluate(() => (window as any).jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus);
  expect(await indicator()).toBe('idle');
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  // the reconnected socket was proven with kernel_info, whose status messages JupyterLab does not track
  expect(await indicator()).toBe('idle');
  await expect(page.locator('#jp-main-statusbar')).toContainText('| Idle');
  expect((await typeAndRun(page, 'print(w + 1)', '42')).prompt).toBe('[2]:');
});

test('Resume pressed while the pause is still finishing is queued, then posted', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['queued.ipynb']);
  // a cell that keeps the pause waiting (it waits for the kernel to be idle) until the test lets it go
  await pauseWhileTheGatedCellRuns(page);
  // Enter takes the dialog's default, which must wait for the cell, never interrupt it
  await expect(page.locator('.jp-Dialog').getByRole('button', { name: 'Wait and pause' })).toBeFocused();
  // how long the wait lasts is this server's busy timeout (8 s in ui-tests), not the 60 s default
  await expect(page.locator('.jp-Dialog')).toContainText("It waits up to 8 s (the server's GkewsApp.busy_timeout)");
  await page.keyboard.press('Enter');
  await page.getByRole('button', { name: /^Resume after pause:/ }).click();
  await expect(statusItem(page)).toContainText('resume queued');
  await page.contents.uploadContent('', 'text', `${tmpPath}/gate`);
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[3]:');
});

test('the page reloaded during the resume: the reloaded notebook runs its next cell', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['reloaded.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  const accepted = page.waitForResponse(r => new URL(r.url()).pathname.endsWith('/gkews/resume') && r.status() === 202);
  await resumeButton(page).click();
  await accepted;
  await page.reload({ waitForIsReady: false });
  await expect(page.getByRole('main').locator('.jp-NotebookPanel')).toBeVisible();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  // the verdict, once, whether the resume ended before the reloaded page read the status or after
  await expect(notification(page, 'Resumed reloaded.ipynb from its checkpoint: 1 variable restored.')).toHaveCount(1);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[2]:');
});

test('a resumed kernel shut down afterwards: a reload starts a kernel at once, with no error', async ({
  page,
  tmpPath
}) => {
  // The reloaded page tried for 30 s to reconnect the notebook to the kernel the user had shut down, then
  // showed JupyterLab's "Error Starting Kernel" dialog and "not reconnected", on every reload.
  await openAndRun(page, tmpPath, ['shut.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await page.evaluate(() => (window as any).jupyterapp.commands.execute('kernelmenu:shutdown'));
  await expect(page.locator('#jp-main-statusbar')).toContainText('No Kernel');
  await page.reload({ waitForIsReady: false });
  await expect(page.getByRole('main').locator('.jp-NotebookPanel')).toBeVisible();
  await expect(page.locator('#jp-main-statusbar')).toContainText('| Idle', { timeout: 20_000 });
  await expect(statusItem(page)).toHaveText('GPU session: ready');
  const { prompt } = await typeAndRun(page, 'print("w" in dir())', 'False\n');
  expect(prompt).toBe('[1]:'); // a fresh kernel, as the user asked for by shutting the old one down
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
});

test('the same notebook open in two tabs: both run their next cell', async ({ page, tmpPath, baseURL }) => {
  const [path] = await openAndRun(page, tmpPath, ['twotabs.ipynb']);
  const second = await page.context().newPage();
  await second.goto(`${baseURL}/lab/workspaces/gkews-second-tab/tree/${path}`);
  const secondPanel = second.locator('.jp-NotebookPanel:visible');
  await expect(secondPanel.locator('.jp-Notebook .jp-Cell')).toHaveCount(1, { timeout: 60_000 });
  await expect(second.locator('#jp-main-statusbar')).toContainText('Idle', { timeout: 60_000 });

  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(statusItem(second)).toHaveText('GPU session: ready', READY);
  await typeAndRun(second, 'print(w + 1)', '42\n');
  await typeAndRun(page, 'print(w + 2)', '43\n');
  await second.close();
});

test('two notebooks open: each runs its next cell in its own kernel', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['first.ipynb', 'second.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(
    notification(page, 'Paused first.ipynb and second.ipynb; Resume brings their kernels back.')
  ).toHaveCount(1);
  for (const name of ['first.ipynb', 'second.ipynb']) {
    await page.notebook.activate(name);
    const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
    expect(prompt).toBe('[2]:');
  }
});

test('a cell left running at Pause is interrupted on request, and the next cell runs after Resume', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['running.ipynb']);
  await page.notebook.addCell('code', 'import time\nfor _ in range(600):\n    time.sleep(1)');
  await page.notebook.runCell(1, { inplace: true, wait: false } as any);
  await expect(page.locator('#jp-main-statusbar')).toContainText('Busy');
  await pauseButton(page).click();
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Interrupt and pause' }).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await expect(page.locator('.jp-Notebook .jp-Cell').nth(1).locator('.jp-OutputArea-output')).toContainText(
    'KeyboardInterrupt'
  );
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[3]:');
});

test('cells run while paused and while resuming wait, then run in order once ready', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['held.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  const whilePaused = await typeAndSchedule(page, 'print("while paused", w)');
  await expect(
    notification(page, 'held.ipynb is paused: the cell will run after Resume, once it is ready.')
  ).toHaveCount(1);
  await resumeButton(page).click();
  const whileResuming = await typeAndSchedule(page, 'print("while resuming", w + 1)');
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(whilePaused.locator('.jp-OutputArea-output')).toHaveText('while paused 41\n');
  await expect(whileResuming.locator('.jp-OutputArea-output')).toHaveText('while resuming 42\n');
  await expect(whilePaused.locator('.jp-InputPrompt')).toHaveText('[2]:');
  await expect(whileResuming.locator('.jp-InputPrompt')).toHaveText('[3]:');
  const { prompt } = await typeAndRun(page, 'print(w + 2)', '43\n');
  expect(prompt).toBe('[4]:');
});

test('Interrupt while paused drops the cells held, saying so: they do not run after Resume', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['interrupt.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  const held = await typeAndSchedule(page, 'w = 0');
  await expect(
    notification(page, 'interrupt.ipynb is paused: the cell will run after Resume, once it is ready.')
  ).toHaveCount(1);
  await page.menu.clickMenuItem('Kernel>Interrupt Kernel');
  await expect(notification(page, 'interrupt.ipynb is paused: the 1 cell(s) waiting for it will not run.')).toHaveCount(
    1
  );
  await expect(held.locator('.jp-InputPrompt')).toHaveText('[ ]:');
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[2]:');
  await expect(held.locator('.jp-InputPrompt')).toHaveText('[ ]:');
});

test('a cell held while paused still runs after Resume when the page was reloaded in between', async ({
  page,
  tmpPath
}) => {
  const [path] = await openAndRun(page, tmpPath, ['heldreload.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await typeAndSchedule(page, 'print("held", w)');
  await expect(
    notification(page, 'heldreload.ipynb is paused: the cell will run after Resume, once it is ready.')
  ).toHaveCount(1);
  await page.keyboard.press('Control+s');
  // (the file on the server, not a class in the page: the reload opens what was saved)
  await expect.poll(() => savedSources(page, path), PAUSED).toContain('print("held", w)');
  // (Galata's own wait is for a Launcher tab, and this page restores only the notebook)
  await page.reload({ waitForIsReady: false });
  const held = page.locator('.jp-NotebookPanel:visible .jp-Notebook .jp-Cell').nth(1);
  await expect(held).toContainText('print("held", w)', PAUSED); // (a whole page load, on a loaded machine)
  await expect(statusItem(page)).toHaveText('GPU session: paused');
  await expect(held.locator('.jp-InputPrompt')).toHaveText('[*]:'); // it still waits: it said [ ]
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(held.locator('.jp-OutputArea-output')).toHaveText('held 41\n'); // the reload dropped it
  await expect(held.locator('.jp-InputPrompt')).toHaveText('[2]:');
});

test('Run All once the paused notebook lost its session: no kernel dialog, outputs kept, the cells run after Resume', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['runall.ipynb'], ['w = 41', 'print("b", w)', 'print("c", w)']);
  const before = await serverKernels(page);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  // JupyterLab's session poll (every 10 s) drops the released kernel's session: the notebook has "No Kernel"
  await page.waitForFunction(() => (window as any).jupyterapp.shell.currentWidget.sessionContext.hasNoKernel, null, {
    timeout: 60_000
  });
  await page.menu.clickMenuItem('Run>Run All Cells');
  await expect(
    notification(page, 'runall.ipynb is paused: the cell will run after Resume, once it is ready.')
  ).toHaveCount(1);
  await expect(page.locator('.jp-Dialog')).toHaveCount(0); // it offered "Select Kernel", once per cell
  const cells = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell');
  await expect(cells.nth(1).locator('.jp-OutputArea-output')).toHaveText('b 41\n'); // "No Kernel" cleared it
  expect(await serverKernels(page)).toEqual([]); // accepting the dialog started a fresh kernel while paused
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(cells.nth(2).locator('.jp-InputPrompt')).toHaveText('[6]:');
  await expect(cells.nth(2).locator('.jp-OutputArea-output')).toHaveText('c 41\n');
  expect(await serverKernels(page)).toEqual(before);
});

test('Restart Kernel and Change Kernel while paused are refused, saying why; Resume brings the variables back', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['restart.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await page.menu.clickMenuItem('Kernel>Restart Kernel…');
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Confirm Kernel Restart' }).click();
  await expect(
    notification(page, 'restart.ipynb is paused: its kernel was released, so there is none to restart.')
  ).toHaveCount(1);
  // Change Kernel ended in JupyterLab's "culled or died unexpectedly", with no word of the pause
  await page.menu.clickMenuItem('Kernel>Change Kernel…');
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Select' }).click();
  await expect(notification(page, 'restart.ipynb is paused: its kernel cannot be changed now.')).toHaveCount(1);
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  expect(await serverKernels(page)).toEqual([]);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[2]:');
});

test('New Console for a paused notebook is refused, saying to resume; after Resume the console has its variables', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['console.ipynb']);
  const [released] = await serverKernels(page);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  // the notebook has no kernel now, so JupyterLab asks which one; the page still lists the released one
  await page.menu.clickMenuItem('File>New Console for Notebook');
  const dialog = page.locator('.jp-Dialog');
  await dialog.locator('select').selectOption({ label: `python3 (${released.slice(0, 8)})` });
  await dialog.getByRole('button', { name: 'Select' }).click();
  await expect(dialog).toContainText("/console.ipynb' is paused: the pause released its kernel", PAUSED);
  await expect(dialog).toContainText('Resume it first');
  expect(await serverKernels(page)).toEqual([]); // not a new, empty kernel under the notebook's name
  await dialog.getByRole('button').last().click();
  await expect(dialog).toHaveCount(0);
  await page.notebook.activate('console.ipynb');
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await page.menu.clickMenuItem('File>New Console for Notebook');
  // (the refused console's tab stays open, without a kernel: the new one is the last)
  const console = page.locator('.jp-CodeConsole:visible').last();
  await console.locator('.jp-CodeConsole-promptCell .jp-InputArea-editor').click();
  await page.keyboard.type('print(w * 2)');
  await page.keyboard.press('Shift+Enter');
  await expect(console.locator('.jp-OutputArea-output').last()).toHaveText('82\n', READY);
});
test('a cell run while the pause is still checkpointing waits, then runs after Resume', async ({ page, tmpPath }) => {
  // a variable whose checkpoint waits until the test lets it go (the file "gate"): the pause stays "pausing"
  const slow = [
    'import os, time',
    'class Slow:',
    '    def __reduce__(self):',
    '        while not os.path.exists("gate"):',
    '            time.sleep(0.05)',
    '        return (int, (0,))',
    'slow = Slow()'
  ].join('\n');
  await openAndRun(page, tmpPath, ['slow.ipynb'], ['w = 41', slow]);
  await pauseButton(page).click();
  await expect(statusItem(page)).toContainText('GPU session: pausing (checkpointing', PAUSED);
  const whilePausing = await typeAndSchedule(page, 'print("while pausing", w)');
  await expect(
    notification(page, 'slow.ipynb is being paused: the cell will run after Resume, once it is ready.')
  ).toHaveCount(1);
  await page.contents.uploadContent('', 'text', `${tmpPath}/gate`);
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(whilePausing.locator('.jp-OutputArea-output')).toHaveText('while pausing 41\n', READY);
  await expect(whilePausing.locator('.jp-InputPrompt')).toHaveText('[3]:');
});

test('a kernel whose cell crashed it while the pause waited: the pause says so, and the cell is not run again', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['crash.ipynb']);
  // it began before the pause: its side effect happened once, then its kernel died without an answer
  await page.notebook.addCell('code', GATED('os._exit(1)', 'open("runs.txt", "a").write("ran\\n")\n'));
  await page.notebook.runCell(1, { inplace: true, wait: false } as any);
  await expect(page.locator('#jp-main-statusbar')).toContainText('Busy');
  await pauseButton(page).click();
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Wait and pause' }).click();
  await page.contents.uploadContent('', 'text', `${tmpPath}/gate`);
  // not "paused" with the new, empty kernel's checkpoint: the pause failed and says why
  await expect(statusItem(page)).toHaveText('GPU session: failed', PAUSED);
  await expect(notification(page, 'No notebook could be checkpointed, so nothing was released')).toHaveCount(1);
  const status = await (await page.request.get('/gkews/status')).json();
  expect(status.message).toMatch(/crash\.ipynb: (its kernel restarted during the pause|the kernel .* restarted)/);
  await page
    .locator('.jp-Dialog')
    .getByRole('button', { name: 'Ok' })
    .click({ timeout: 5000 })
    .catch(() => undefined); // JupyterLab's own "kernel restarting" dialog, when it shows one
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await typeAndRun(page, 'print(open("runs.txt").read().count("ran"))', '1\n');
});

test('a notebook opened while another is paused is paused from its own toolbar; Resume brings both back', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['before.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  // before.ipynb's toolbar offers Resume; the notebook opened now runs a kernel of its own, and its toolbar pauses it
  await openAndRun(page, tmpPath, ['since.ipynb'], ['v = 1']);
  await pauseButton(page).click();
  await expect(
    notification(page, 'Paused since.ipynb and before.ipynb; Resume brings their kernels back.')
  ).toHaveCount(1, PAUSED);
  await expect(statusItem(page)).toHaveText('GPU session: paused');
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await typeAndRun(page, 'print(v + 1)', '2\n');
  await page.notebook.activate('before.ipynb');
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[2]:');
});

/** A variable whose restore kills its kernel once: the first time it meets the file "die" (which it removes). */
const DIES_ONCE = [
  'import os',
  'def _die_once(flag):',
  '    if os.path.exists(flag):',
  '        os.remove(flag)',
  '        os._exit(1)',
  '    return 0',
  'class DiesOnce:',
  '    def __reduce__(self):',
  '        return (_die_once, ("die",))',
  'd = DiesOnce()'
].join('\n');

test('a kernel that died during its restore: the page says not resumed, its next cell runs, and Resume brings it back', async ({
  page,
  tmpPath
}) => {
  // The status said "ready" and the toolbar Pause while the server said the notebook was still to resume,
  // and the next cell stayed [*] for ever (the page stayed on the dead kernel's connection).
  await openAndRun(page, tmpPath, ['dies.ipynb'], ['w = 41', DIES_ONCE]);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await page.contents.uploadContent('', 'text', `${tmpPath}/die`);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: dies.ipynb not resumed', READY);
  await expect(notification(page, 'dies.ipynb was not restored')).toHaveCount(1);
  // the page is on the kernel the server's restarter brought back (empty): a cell runs, it does not hang
  await typeAndRun(page, 'print("w" in dir())', 'False\n');
  await resumeButton(page).click(); // its own toolbar resumes it again
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await typeAndRun(page, 'print(w + 1)', '42\n');
});

test('the only paused notebook deleted while paused: after Resume the page says ready, and Pause works again', async ({
  page,
  tmpPath
}) => {
  const [gone] = await openAndRun(page, tmpPath, ['only.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  // the file browser's Delete: the same request, and the page's own signal
  await page.evaluate(async p => (window as any).jupyterapp.serviceManager.contents.delete(p), gone);
  await expect(statusItem(page)).toHaveAttribute('title', /only\.ipynb was deleted while paused/, { timeout: 30_000 });
  await resumeButton(page).click();
  // it said "reconnecting the notebooks" for ever, after a reload too, and every Pause button stayed disabled
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await openAndRun(page, tmpPath, ['next.ipynb'], ['v = 1']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
});

test('the keyboard alone: Enter on Pause keeps the focus on the button, and Enter again resumes', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['keys.ipynb']);
  await pauseButton(page).focus();
  await page.keyboard.press('Enter');
  // the button was disabled while pausing: the focus went into the notebook, and Tab never reached it again
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await expect(resumeButton(page)).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(pauseButton(page)).toBeFocused();
});

test('while its notebook is being paused, the sidebar turns its Restore off, and back on once resumed', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['sidebar.ipynb']);
  await page.menu.clickMenuItem('Kernel>Checkpoint the current notebook now');
  const row = page.getByRole('region', { name: 'GPU session checkpoints' }).locator('.jp-gkews-Checkpoint').first();
  const restore = row.locator('button', { hasText: 'Restore' });
  await expect(restore).toBeEnabled();
  // a cell keeps the pause waiting (up to the busy timeout): the rows were drawn for "active" until it ended
  await pauseWhileTheGatedCellRuns(page);
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Wait and pause' }).click();
  await expect(statusItem(page)).toContainText('pausing');
  await expect(restore).toBeDisabled();
  await expect(restore).toHaveAttribute('title', /sidebar\.ipynb is being paused/);
  await page.contents.uploadContent('', 'text', `${tmpPath}/gate`);
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  await expect(restore).toBeEnabled();
});

test('a renamed notebook is listed in the sidebar under its new name at once, kernel or not', async ({
  page,
  tmpPath
}) => {
  await openAndRun(page, tmpPath, ['before.ipynb', 'later.ipynb']);
  await page.notebook.activate('before.ipynb');
  await page.menu.clickMenuItem('Kernel>Checkpoint the current notebook now');
  const sidebar = page.getByRole('region', { name: 'GPU session checkpoints' });
  const listed = (name: string) => sidebar.getByRole('list', { name: `Checkpoints of ${tmpPath}/${name}` });
  await expect(listed('before.ipynb')).toBeVisible();
  // its kernel shut down: no session changes when its file is renamed, nothing else tells the list
  await page.evaluate(async p => {
    const sessions = (window as any).jupyterapp.serviceManager.sessions;
    const model = (await sessions.findByPath(p)) as { id: string };
    await sessions.shutdown(model.id);
  }, `${tmpPath}/before.ipynb`);
  // as the file browser renames it (through the page)
  expect(await page.contents.renameFile(`${tmpPath}/before.ipynb`, `${tmpPath}/after.ipynb`)).toBe(true);
  await expect(listed('after.ipynb')).toBeVisible();
  await expect(listed('before.ipynb')).toHaveCount(0);
  // and while paused, the checkpoints the pause took follow the notebook still open
  await page.notebook.activate('later.ipynb');
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await expect(listed('later.ipynb')).toBeVisible();
  expect(await page.contents.renameFile(`${tmpPath}/later.ipynb`, `${tmpPath}/renamed.ipynb`)).toBe(true);
  await expect(listed('renamed.ipynb')).toBeVisible();
  await expect(listed('later.ipynb')).toHaveCount(0);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
  const { prompt } = await typeAndRun(page, 'print(w + 1)', '42\n');
  expect(prompt).toBe('[2]:');
});

test('Pause run as a command while there is nothing to pause says so, and asks nothing', async ({ page, tmpPath }) => {
  // (the buttons, menus and key bindings are off then; an extension or the palette API may still run it)
  await openAndRun(page, tmpPath, ['nothing.ipynb']);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await page.evaluate(() => (window as any).jupyterapp.commands.execute('gkews:pause'));
  await expect(notification(page, 'The GPU session is paused: nothing to pause now.')).toHaveCount(1);
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
});

test('a pause notification longer than JupyterLab shows offers its whole text', async ({ page, tmpPath }) => {
  const name =
    'fine-tune llama 3 8B with LoRA adapters on the cleaned support tickets (copy 2) - final final run.ipynb';
  await openAndRun(page, tmpPath, [name]);
  await pauseButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  // "Paused <name>; Resume brings its kernel back." lost its end to the 140 characters of a toast
  const toast = page.locator('.Toastify__toast').filter({ hasText: 'Paused fine-tune llama' });
  await toast.getByRole('button', { name: 'Show all' }).click();
  await expect(page.locator('.jp-Dialog')).toContainText(`Paused ${name}; Resume brings its kernel back.`);
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Close' }).click();
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
});

test('a running cell the pause waits for is not said to run after Resume', async ({ page, tmpPath }) => {
  await openAndRun(page, tmpPath, ['ends.ipynb']);
  await pauseWhileTheGatedCellRuns(page);
  await page.locator('.jp-Dialog').getByRole('button', { name: 'Wait and pause' }).click();
  await expect(statusItem(page)).toContainText('pausing');
  await page.contents.uploadContent('', 'text', `${tmpPath}/gate`);
  await expect(statusItem(page)).toHaveText('GPU session: paused', PAUSED);
  await expect(page.locator('.jp-Notebook .jp-InputPrompt').first()).toHaveText('[2]:'); // it ran, once
  // every notification of the page, the toasts already closed too: none says it will run again
  await page.evaluate(() => (window as any).jupyterapp.commands.execute('apputils:display-notifications'));
  await expect(page.locator('.jp-Notification-Center')).toContainText('Paused ends.ipynb');
  await expect(page.locator('.jp-Notification-Center')).not.toContainText('will run after Resume');
  await resumeButton(page).click();
  await expect(statusItem(page)).toHaveText('GPU session: ready', READY);
});
