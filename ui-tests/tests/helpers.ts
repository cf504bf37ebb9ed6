/** What the browser tests share: notebooks to upload, what the server runs, what the page shows. */
import { expect } from '@jupyterlab/galata';
import type { APIRequestContext, Locator, Page } from '@playwright/test';

/** A notebook file with these code cells, on the default Python kernel. */
export function newNotebook(sources: string[]) {
  return {
    cells: sources.map(source => ({ cell_type: 'code', source, metadata: {}, outputs: [], execution_count: null })),
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3 (ipykernel)', language: 'python' } },
    nbformat: 4,
    nbformat_minor: 5
  };
}

/** The kernel ids the server runs, from the page's own origin. */
export async function serverKernels(page: Page): Promise<string[]> {
  const r = await page.request.get('/api/kernels');
  return ((await r.json()) as { id: string }[]).map(k => k.id);
}

/** The server's sessions, as [session id, path, kernel id], from the page's own origin. */
export async function serverSessions(page: Page): Promise<string[][]> {
  const r = await page.request.get('/api/sessions');
  return ((await r.json()) as { id: string; path: string; kernel: { id: string } | null }[]).map(s => [
    s.id,
    s.path,
    s.kernel?.id ?? ''
  ]);
}

/** The code of each cell in the notebook file the server holds at `path` (what a reload will show). */
export async function savedSources(page: Page, path: string): Promise<string[]> {
  const r = await page.request.get(`/api/contents/${encodeURI(path)}?content=1`);
  const model = (await r.json()) as { content: { cells: { source: string | string[] }[] } };
  return model.content.cells.map(c => (Array.isArray(c.source) ? c.source.join('') : c.source));
}

/** What the current notebook panel in the page is connected to. */
export async function panelKernel(page: Page): Promise<{ id: string | null; connection: string | null }> {
  return page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    const kernel = widget?.sessionContext?.session?.kernel;
    return { id: kernel?.id ?? null, connection: kernel?.connectionStatus ?? null };
  });
}

/** A JupyterLab notification (toast) that says `text`. */
export function notification(page: Page, text: string): Locator {
  return page.locator('[class*="jp-Notification-Toast-"]').filter({ hasText: text });
}

/** The status bar item of the extension. */
export function statusItem(page: Page): Locator {
  return page.locator('.jp-gkews-StatusItem');
}

/**
 * A resumed kernel is started by the server, so Galata does not know to shut
 * it down: every test leaves the server without kernels, so that the next
 * one's Pause (which takes every running kernel) sees only its own.
 */
export async function shutDownEverything(request: APIRequestContext): Promise<void> {
  const sessions = (await (await request.get('/api/sessions')).json()) as { id: string }[];
  for (const s of sessions) {
    await request.delete(`/api/sessions/${s.id}`);
  }
  const kernels = (await (await request.get('/api/kernels')).json()) as { id: string }[];
  for (const k of kernels) {
    await request.delete(`/api/kernels/${k.id}`);
  }
}

/**
 * What a user does next: add a cell below the last one of the visible
 * notebook, type `code`, run it with Shift+Enter, and read what it printed and
 * its prompt number. Plain keyboard and mouse, so it works in a second tab
 * too (without Galata's helpers).
 */
export async function typeAndRun(
  page: Page,
  code: string,
  expected: string,
  timeout = 60_000
): Promise<{ prompt: string }> {
  const cell = await typeAndSchedule(page, code);
  await expect(cell.locator('.jp-OutputArea-output')).toHaveText(expected, { timeout });
  // the output comes before the reply that numbers the cell: wait for its number
  await expect(cell.locator('.jp-InputPrompt')).toHaveText(/^\[\d+\]:$/, { timeout });
  const prompt = (await cell.locator('.jp-InputPrompt').textContent()) ?? '';
  return { prompt: prompt.trim() };
}

/** The same, without waiting for the cell to run: returns the new cell. */
export async function typeAndSchedule(page: Page, code: string): Promise<Locator> {
  const panel = page.locator('.jp-NotebookPanel:visible');
  const cells = panel.locator('.jp-Notebook .jp-Cell');
  const before = await cells.count();
  await cells
    .nth(before - 1)
    .locator('.jp-InputArea-editor')
    .click();
  await page.keyboard.press('Escape');
  await page.keyboard.press('b');
  await expect(cells).toHaveCount(before + 1);
  const cell = cells.nth(before);
  await page.keyboard.press('Enter');
  await expect(cell.locator('.jp-InputArea-editor')).toHaveClass(/jp-mod-focused/);
  await page.keyboard.type(code);
  await page.keyboard.press('Shift+Enter');
  return cell;
}
