/**
 * A cell run while its notebook is paused, or while its kernel is coming back,
 * would go to the released kernel's socket and be lost: its prompt would show
 * [*] for ever and nothing would say why. Such a cell is held instead: a
 * notification says the notebook is paused (and that Resume runs it), and the
 * held cells run, in the order they were run, on the restored kernel as soon
 * as this page has the notebook back ("ready"). If the resume fails, they are
 * released with a message that they did not run.
 */
import { Notification } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import type { Cell, ICodeCellModel } from '@jupyterlab/cells';
import { Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { holdReason } from './holdreason';
import { GkewsModel } from './model';

interface IHeld {
  panel: NotebookPanel;
  cells: Cell[];
}

export class HeldCells {
  constructor(
    private model: GkewsModel,
    private panels: () => NotebookPanel[]
  ) {
    NotebookActions.executionScheduled.connect(this.onScheduled, this);
    model.changed.connect(this.onChanged, this);
  }

  /** Cells held per panel, for the tests and the details. */
  get count(): number {
    return [...this.held.values()].reduce((n, h) => n + h.cells.length, 0);
  }

  private onScheduled(_: unknown, args: { notebook: Notebook; cell: Cell }): void {
    const panel = this.panels().find(p => p.content === args.notebook);
    if (!panel || args.cell.model.type !== 'code') {
      return;
    }
    const why = holdReason(this.model, panel);
    if (!why) {
      return;
    }
    let held = this.held.get(panel);
    if (!held) {
      held = { panel, cells: [] };
      this.held.set(panel, held);
      const after = this.model.status?.state === 'paused' ? 'after Resume, once it is ready' : 'once it is ready';
      Notification.info(`${PathExt.basename(panel.context.path)} ${why}: the cell will run ${after}.`, {
        autoClose: 8000
      });
    }
    if (!held.cells.includes(args.cell)) {
      held.cells.push(args.cell);
    }
  }

  private onChanged(): void {
    const state = this.model.status?.state;
    for (const [panel, held] of [...this.held]) {
      if (panel.isDisposed) {
        this.held.delete(panel);
        continue;
      }
      const failed = state === 'failed' || this.failedToReconnect(panel);
      if (!failed && (state !== 'active' || holdReason(this.model, panel))) {
        continue;
      }
      this.held.delete(panel);
      // a cell the lost request reached after all has a count: it ran, once
      const cells = held.cells.filter(
        c => !c.isDisposed && c.model.type === 'code' && (c.model as ICodeCellModel).executionCount === null
      );
      if (failed) {
        cells.forEach(c => c.setPrompt(''));
        Notification.warning(
          `${cells.length} cell(s) run in ${PathExt.basename(panel.context.path)} while it was paused did not ` +
            'run: its kernel did not come back. Run them again once it has one.',
          { autoClose: false }
        );
      } else if (cells.length) {
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

  private held = new Map<NotebookPanel, IHeld>();
}
