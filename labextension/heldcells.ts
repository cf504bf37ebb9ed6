/**
 * A cell run while its notebook is being paused or is paused, or while its
 * kernel is coming back, would be lost: a released kernel never runs it, its
 * prompt would show [*] for ever and nothing would say why. Such a cell is
 * held instead: a notification says the notebook is paused (and that Resume
 * runs it), and once this page has the notebook back ("ready") the held cells
 * that never ran are run again, in the order they were run, on the restored
 * kernel. A cell sent just before this page saw the pause is held too.
 *
 * A kernel that lived on (GPU suspend, a restored Pod snapshot, or a pause
 * that failed) got the cell's request and runs it itself once let go: it is
 * not sent twice. If the kernel did not come back, the cells are released
 * with a message that they did not run.
 *
 * Once JupyterLab has dropped the released kernel's session, a run asks the
 * session context to start a kernel before the cell is scheduled: JupyterLab
 * would offer its kernel dialog (one per cell for Run All), and choosing
 * "No Kernel" there clears each cell's outputs. guard() makes that request
 * wait, the cell untouched, until the notebook is back; the cell then runs on
 * the restored kernel. A restart or a change of kernel asked while paused is
 * refused with a message: there is no kernel to restart or replace.
 *
 * Interrupt while paused drops the cells held (as an interrupt drops a busy
 * kernel's queue): they will not run after Resume, and a message says so. A
 * kernel that lives on suspended has the cells itself and ignores interrupts
 * while held: the message says to interrupt them after Resume.
 *
 * Held cells outlive a page reload: their ids are kept in the tab's
 * sessionStorage (another tab must not run them too), by notebook path and
 * pause cycle, and the reloaded page holds them again (a cell the notebook was
 * not saved with is gone, as it would be).
 */
import { Notification } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import type { Cell, ICodeCellModel } from '@jupyterlab/cells';
import { Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { holdReason, kernelLivedOn } from './holdreason';
import { GkewsModel, LEFT_RUNNING } from './model';
import { belongsTo } from './reattach';

export class HeldCells {
  constructor(
    private model: GkewsModel,
    private panels: () => NotebookPanel[]
  ) {
    NotebookActions.executionScheduled.connect(this.onScheduled, this);
    NotebookActions.executed.connect(this.onExecuted, this);
    model.changed.connect(this.onChanged, this);
  }

  /** Hold a panel's kernel start and restart while its notebook is paused or coming back (see above). */
  guard(panel: NotebookPanel): void {
    // a reloaded page: its cells held before the reload wait again (and show [*]) once the notebook is read,
    // not at the next change of the status, which may come only with Resume
    void panel.context.ready.then(() => this.adoptSaved());
    const sc = panel.sessionContext;
    const start = sc.startKernel.bind(sc);
    const restart = sc.restartKernel.bind(sc);
    sc.startKernel = () => {
      const why = holdReason(this.model, panel);
      if (!why) {
        return start();
      }
      this.announce(panel, why);
      // resolved by onChanged once the notebook is back: false, its kernel runs the cell;
      // true (JupyterLab then offers its kernel dialog) when it came back without one
      return new Promise<boolean>(resolve => {
        const waiting = this.waiting.get(panel) ?? [];
        waiting.push(resolve);
        this.waiting.set(panel, waiting);
      });
    };
    sc.restartKernel = async () => {
      const why = holdReason(this.model, panel);
      if (!why) {
        return restart();
      }
      Notification.warning(
        `${PathExt.basename(panel.context.path)} ${why}: its kernel was released, so there is none to restart. ` +
          'Resume brings it back with its variables; restart it after that to clear them.',
        { autoClose: 10000 }
      );
    };
    // Change Kernel while paused ended in JupyterLab's "culled or died unexpectedly", and would replace a
    // kernel the resume brings back (or one that lives on suspended) with an empty one.
    const change = sc.changeKernel.bind(sc);
    sc.changeKernel = async options => {
      const why = holdReason(this.model, panel);
      if (!why) {
        return change(options);
      }
      Notification.warning(
        `${PathExt.basename(panel.context.path)} ${why}: its kernel cannot be changed now. ` +
          'Resume brings it back with its variables; change its kernel after that.',
        { autoClose: 10000 }
      );
      return null;
    };
  }

  /** Interrupt asked for a panel (see above); nothing when its notebook is not held. */
  cancel(panel: NotebookPanel): void {
    const why = holdReason(this.model, panel);
    if (!why) {
      return; // its kernel is there: JupyterLab's interrupt reached it
    }
    const name = PathExt.basename(panel.context.path);
    const nb = this.model.status?.notebooks.find(n => belongsTo(panel, n));
    if (nb?.status === 'suspended') {
      Notification.info(
        `${name} ${why}: its kernel is suspended with the cells sent to it, and they run after Resume. ` +
          'Interrupt them then.',
        { autoClose: 10000 }
      );
      return;
    }
    const held = [...(this.held.get(panel) ?? []), ...(this.pending.get(panel) ?? [])].filter(
      c => !c.isDisposed && executionCount(c) === null
    );
    held.forEach(c => showWaiting(c, false));
    this.held.delete(panel);
    this.pending.delete(panel);
    this.remember(panel.context.path, []);
    // a run waiting for a kernel start: with none yet, JupyterLab drops it
    const waiting = this.waiting.get(panel) ?? [];
    this.waiting.delete(panel);
    waiting.forEach(resolve => resolve(false));
    const count = held.length + waiting.length;
    Notification.info(
      count
        ? `${name} ${why}: the ${count} cell(s) waiting for it will not run. Run them again after Resume.`
        : `${name} ${why}: its kernel was released, so there is nothing to interrupt.`,
      { autoClose: 10000 }
    );
  }

  /** Cells held, in all panels (for the tests and the details). */
  get count(): number {
    return [...this.held.values()].reduce((n, cells) => n + cells.length, 0);
  }

  private onScheduled(_: unknown, args: { notebook: Notebook; cell: Cell }): void {
    const panel = this.panels().find(p => p.content === args.notebook);
    if (!panel || args.cell.model.type !== 'code') {
      return;
    }
    const why = holdReason(this.model, panel);
    if (why) {
      this.hold(panel, [args.cell], why);
      return;
    }
    const pending = this.pending.get(panel) ?? new Set<Cell>();
    pending.add(args.cell);
    this.pending.set(panel, pending);
  }

  private onExecuted(_: unknown, args: { notebook: Notebook; cell: Cell }): void {
    for (const [panel, cells] of this.pending) {
      if (panel.content === args.notebook) {
        cells.delete(args.cell);
      }
    }
  }

  private hold(panel: NotebookPanel, cells: Cell[], why: string, announce = true): void {
    if (announce) {
      this.announce(panel, why);
    } else if (!this.held.has(panel)) {
      this.unannounced.set(panel, why);
    }
    const held = this.held.get(panel) ?? [];
    this.held.set(panel, held);
    for (const cell of cells) {
      if (!held.includes(cell)) {
        held.push(cell);
      }
    }
    this.remember(panel.context.path, held);
  }

  /** Keep (or, with no cells, forget) a panel's held cells for a reloaded page. */
  private remember(path: string, cells: Cell[]): void {
    const saved = readSaved();
    if (cells.length && this.model.status) {
      saved[path] = { cycle: this.model.status.cycle, ids: cells.map(c => c.model.id) };
    } else {
      delete saved[path];
    }
    try {
      window.sessionStorage.setItem(SAVED_KEY, JSON.stringify(saved));
    } catch {
      // storage full or turned off: the cells are still held on this page
    }
  }

  /** A reloaded page holds again the cells the page before it held, in this pause cycle. */
  private adoptSaved(): void {
    const saved = readSaved();
    for (const panel of this.panels()) {
      const entry = saved[panel.context.path];
      if (!entry || this.held.has(panel) || panel.isDisposed || !panel.context.isReady) {
        continue;
      }
      const byId = new Map(panel.content.widgets.map(c => [c.model.id, c]));
      const cells = entry.ids.map(id => byId.get(id)).filter((c): c is Cell => !!c && executionCount(c) === null);
      if (entry.cycle === this.model.status?.cycle && cells.length) {
        this.held.set(panel, cells);
        cells.forEach(c => showWaiting(c, true));
      } else {
        this.remember(panel.context.path, []);
      }
    }
  }

  /** Says once per pause of a panel that its cells wait. */
  private announce(panel: NotebookPanel, why: string): void {
    if (this.held.has(panel) || this.waiting.has(panel)) {
      return;
    }
    this.unannounced.delete(panel);
    this.sayHeld(panel, why);
  }

  private sayHeld(panel: NotebookPanel, why: string): void {
    const state = this.model.status?.state;
    const after = state === 'paused' || state === 'pausing' ? 'after Resume, once it is ready' : 'once it is ready';
    Notification.info(`${PathExt.basename(panel.context.path)} ${why}: the cell will run ${after}.`, {
      autoClose: 8000
    });
  }

  private onChanged(): void {
    this.adoptSaved();
    for (const [panel, waiting] of [...this.waiting]) {
      if (panel.isDisposed || !holdReason(this.model, panel)) {
        this.waiting.delete(panel);
        const noKernel = panel.isDisposed || !panel.sessionContext.session?.kernel;
        waiting.forEach(resolve => resolve(noKernel));
      }
    }
    // a pause this page saw late: the cells sent just before it still wait for their answer
    for (const [panel, cells] of [...this.pending]) {
      // (a cell whose request was cancelled, its kernel gone, gets no "executed": it is idle again)
      const waiting = [...cells].filter(c => !c.isDisposed && waitsForKernel(c));
      const why = panel.isDisposed ? null : holdReason(this.model, panel);
      if (why && waiting.length) {
        // one of them may be running: "Wait and pause" lets it finish, "Interrupt and pause" stops it, and
        // either way it answers before the kernel goes. Said once paused, of those that are still waiting.
        this.hold(panel, waiting, why, false);
      }
      if (why || !waiting.length) {
        this.pending.delete(panel);
      } else {
        this.pending.set(panel, new Set(waiting));
      }
    }
    const status = this.model.status;
    for (const [panel, why] of [...this.unannounced]) {
      if (status?.state === 'pausing') {
        continue;
      }
      this.unannounced.delete(panel);
      const still = (this.held.get(panel) ?? []).filter(c => !c.isDisposed && executionCount(c) === null);
      if (still.length && !panel.isDisposed && holdReason(this.model, panel)) {
        this.sayHeld(panel, why);
      }
    }
    for (const [panel, held] of [...this.held]) {
      if (panel.isDisposed) {
        this.held.delete(panel);
        this.remember(panel.context.path, []);
        continue;
      }
      const nb = status?.notebooks.find(n => belongsTo(panel, n));
      const leftRunning = !!nb && LEFT_RUNNING.includes(nb.status);
      const failed = status?.state === 'failed' || this.failedToReconnect(panel);
      if (holdReason(this.model, panel) || (!failed && !leftRunning && status?.state !== 'active')) {
        continue;
      }
      this.held.delete(panel);
      this.remember(panel.context.path, []);
      // a cell the request reached after all has a count: it ran, once
      const cells = held.filter(c => !c.isDisposed && c.model.type === 'code' && executionCount(c) === null);
      if (!cells.length || leftRunning || kernelLivedOn(nb, failed)) {
        continue; // its kernel got each request and runs it (or ran it) itself
      }
      if (failed) {
        cells.forEach(c => showWaiting(c, false));
        Notification.warning(
          `${cells.length} cell(s) run in ${PathExt.basename(panel.context.path)} while it was paused did not ` +
            'run: its kernel did not come back. Run them again once it has one.',
          { autoClose: false }
        );
      } else {
        void this.run(panel, cells);
      }
    }
  }

  private failedToReconnect(panel: NotebookPanel): boolean {
    const failed = this.model.attachment?.failed ?? {};
    return Object.keys(failed).some(path => path === panel.context.path);
  }

  private async run(panel: NotebookPanel, cells: Cell[]): Promise<void> {
    const notebook = panel.content;
    const mode = notebook.mode; // runCells switches to command mode: keep the user's editing
    const done = NotebookActions.runCells(notebook, cells, panel.sessionContext);
    if (mode === 'edit') {
      notebook.mode = 'edit';
    }
    await done;
  }

  private held = new Map<NotebookPanel, Cell[]>();
  /** Kernel starts waiting for the notebook to be back (guard), per panel. */
  private waiting = new Map<NotebookPanel, ((askForKernel: boolean) => void)[]>();
  /** Cells sent to a kernel that have not finished yet, per panel. */
  private pending = new Map<NotebookPanel, Set<Cell>>();
  /** Panels whose cells a pause seen late holds, not said yet (see onChanged), and why. */
  private unannounced = new Map<NotebookPanel, string>();
}

const SAVED_KEY = 'jupyter-gkews:held-cells';

/** The held cells a page kept: notebook path -> the pause cycle and the cells' ids. */
function readSaved(): Record<string, { cycle: number; ids: string[] }> {
  try {
    const saved = JSON.parse(window.sessionStorage.getItem(SAVED_KEY) ?? '{}');
    return saved && typeof saved === 'object' ? saved : {};
  } catch {
    return {};
  }
}

function executionCount(cell: Cell): number | null {
  return (cell.model as ICodeCellModel).executionCount;
}

/**
 * Show a held cell as waiting ([*]) or not ([ ]): through its model's execution state, from which JupyterLab
 * draws the prompt (a prompt set on the widget alone was drawn over with [ ] as a reloaded page rendered it).
 */
function showWaiting(cell: Cell, waiting: boolean): void {
  if (cell.model.type === 'code') {
    (cell.model as ICodeCellModel).executionState = waiting ? 'running' : 'idle';
  }
  cell.setPrompt(waiting ? '*' : '');
}

/** Sent, and still without an answer: its prompt shows [*]. */
function waitsForKernel(cell: Cell): boolean {
  const model = cell.model as ICodeCellModel;
  return model.executionState === 'running' && model.executionCount === null;
}
