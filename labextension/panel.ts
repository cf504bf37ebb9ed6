import { Dialog } from '@jupyterlab/apputils';
import { Contents, Session } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { showDialog } from './dialog';
import { checkpointIcon } from './icons';
import { checkpointLine, formatBytes, pausedKernelNote, plural, resumesFrom } from './describe';
import { toast } from './toast';
import { GkewsModel } from './model';
import { GkewsError, ICheckpoint } from './types';

/** How often the toggle asks a kernel that runs a cell again whether its automatic checkpoints are on. */
const AUTO_RETRY_MS = 2000;

/**
 * The sidebar list of checkpoints, grouped per notebook: time, size,
 * variables, skipped; restore into the running kernel (after a confirmation)
 * and delete. Per notebook, a toggle for a checkpoint after every cell, and on
 * those automatic checkpoints "Rewind to after cell [N]".
 */
/**
 * A section's Rewind and Restore off while its notebook's kernel runs a cell (why: the server's words), or on
 * again (why null) where this made them off.
 */
function busyRows(rows: HTMLElement, why: string | null): void {
  for (const b of Array.from(rows.querySelectorAll<HTMLButtonElement>('button[data-into-kernel]'))) {
    if (why !== null && !b.disabled) {
      b.dataset.title = b.title;
      b.disabled = true;
      b.title = `Not available now: ${why}`;
    } else if (why === null && b.dataset.title !== undefined) {
      b.disabled = false;
      b.title = b.dataset.title;
      delete b.dataset.title;
    }
  }
}

export class CheckpointPanel extends Widget {
  constructor(
    private model: GkewsModel,
    private sessions: Session.IManager,
    contents: Contents.IManager
  ) {
    super();
    this.id = 'jp-gkews-checkpoints';
    this.addClass('jp-gkews-CheckpointPanel');
    this.title.icon = checkpointIcon;
    this.title.caption = 'GPU session checkpoints';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'GPU session checkpoints');

    const header = document.createElement('div');
    header.className = 'jp-gkews-CheckpointPanel-header';
    const title = document.createElement('h2');
    title.textContent = 'Checkpoints';
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button jp-mod-styled jp-mod-reject';
    refresh.textContent = 'Refresh';
    refresh.title = 'Read the list of checkpoints again';
    refresh.setAttribute('aria-label', 'Refresh the list of checkpoints');
    refresh.addEventListener('click', () => void this.refresh());
    header.append(title, refresh);
    this.node.append(header, this.listNode);

    // a finished pause or a checkpoint-now adds checkpoints: read the list again
    model.transition.connect(() => void this.refresh(), this);
    // a pause or a resume starting turns Restore, Rewind and the toggle off (pausedKernelNote): draw them again
    model.changed.connect(() => {
      const state = `${model.status?.state ?? null}${model.busy ? ' (busy)' : ''}`;
      if (state !== this.drawnFor) {
        this.drawnFor = state;
        void this.refresh();
      }
    }, this);
    // a kernel started or gone changes which notebooks can switch automatic checkpoints
    sessions.runningChanged.connect(() => void this.refresh(), this);
    // a notebook renamed or deleted: its checkpoints follow it (the server moves them), also while paused,
    // when no session of it runs to tell the list
    contents.fileChanged.connect((_, change) => {
      if (change.type === 'rename' || change.type === 'delete') {
        void this.refresh();
      }
    }, this);
  }

  private drawnFor: string | null = null; // the session state the rows were drawn for

  protected onAfterShow(): void {
    void this.refresh();
  }

  async refresh(): Promise<void> {
    if (!this.isVisible) {
      return;
    }
    let rows: ICheckpoint[];
    try {
      rows = await this.model.api.checkpoints();
    } catch (error) {
      this.listNode.textContent = `The list could not be read: ${(error as Error).message}`;
      return;
    }
    this.render(rows);
  }

  private render(rows: ICheckpoint[]): void {
    this.listNode.replaceChildren();
    if (!rows.length) {
      const empty = document.createElement('p');
      empty.textContent =
        'No checkpoints yet. Pause the session, or run "GPU session: checkpoint now" from the command palette.';
      this.listNode.appendChild(empty);
      return;
    }
    const byNotebook = new Map<string, ICheckpoint[]>();
    for (const row of rows) {
      byNotebook.set(row.notebook, [...(byNotebook.get(row.notebook) ?? []), row]);
    }
    for (const [notebook, checkpoints] of byNotebook) {
      const section = document.createElement('section');
      const h = document.createElement('h3');
      h.textContent = notebook;
      const ul = document.createElement('ul');
      section.append(h, this.autoToggle(notebook, ul));
      ul.setAttribute('aria-label', `Checkpoints of ${notebook}`);
      for (const c of checkpoints) {
        ul.appendChild(this.item(c));
      }
      section.appendChild(ul);
      this.listNode.appendChild(section);
    }
  }

  /** "Checkpoint after every cell": read from the notebook's kernel, switched there. */
  private autoToggle(notebook: string, rows: HTMLElement): HTMLLabelElement {
    const label = document.createElement('label');
    label.className = 'jp-gkews-Checkpoint-auto';
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.disabled = true;
    label.append(box, ' Checkpoint after every cell');
    label.title = 'Kernel undo: an automatic checkpoint after every cell of this notebook, written in the background';
    const apply = (status: { enabled: boolean }) => {
      box.checked = status.enabled;
      box.disabled = false;
      busyRows(rows, null);
    };
    // only a running kernel can say or switch it: no request that can only be refused
    const unavailable = this.unavailable(notebook);
    if (unavailable) {
      label.title = `Not available: ${unavailable}`;
      return label;
    }
    const ask = () =>
      this.model.api
        .auto(notebook, 'status')
        .then(apply)
        .catch((error: Error) => {
          label.title = `Not available: ${error.message}`;
          // a kernel running a cell answers once the cell ends: ask again then, while the row is shown
          if (error instanceof GkewsError && error.status === 409 && /running a cell/.test(error.message)) {
            busyRows(rows, error.message); // Rewind and Restore too: the server refuses them until the cell ends
            window.setTimeout(() => label.isConnected && this.isVisible && void ask(), AUTO_RETRY_MS);
          }
        });
    void ask();
    box.addEventListener('change', () => {
      const action = box.checked ? 'on' : 'off';
      box.disabled = true;
      this.model.api
        .auto(notebook, action)
        .then(apply)
        .catch((error: Error) => {
          box.checked = !box.checked;
          box.disabled = false;
          toast('error', `Could not turn automatic checkpoints ${action}: ${error.message}`, { autoClose: false });
        });
    });
    return label;
  }

  /** Why the kernel of `notebook` cannot be asked or restored into now, or null when it can. */
  private unavailable(notebook: string): string | null {
    if (this.model.busy && !pausedKernelNote(notebook, this.model.status)) {
      // this page's Pause or Resume is on its way: the server would refuse (409) what the rows would ask now
      return `a pause or a resume is under way: ${notebook}'s kernel can be used again once it is done.`;
    }
    return pausedKernelNote(notebook, this.model.status) ?? this.noKernelNote(notebook);
  }

  /** Why `notebook` has no kernel to ask, or null when the server runs one for it. */
  private noKernelNote(notebook: string): string | null {
    for (const session of this.sessions.running()) {
      if (session.path === notebook && session.kernel) {
        return null;
      }
    }
    return `${notebook} has no running kernel. Open it and run a cell, then refresh this list.`;
  }

  private item(c: ICheckpoint): HTMLLIElement {
    const li = document.createElement('li');
    li.className = 'jp-gkews-Checkpoint';
    li.dataset.checkpoint = c.id;
    const info = document.createElement('span');
    info.className = 'jp-gkews-Checkpoint-info';
    info.textContent = checkpointLine(c);
    info.title = c.id;
    const cell = c.auto && c.label ? c.label.cell : null;
    if (c.auto && c.label && !c.error) {
      info.textContent += ` · after [${c.label.cell ?? '?'}] ${c.label.source}`;
    }
    li.appendChild(info);
    // a paused notebook, or one whose kernel is not running, has no kernel to restore into: both are off, saying
    // so (Restore asked for a confirmation, then failed: "has no running kernel")
    const paused = this.unavailable(c.notebook);
    if (cell !== null && cell !== undefined) {
      li.appendChild(
        this.button(
          `Rewind to after cell [${cell}]`,
          paused ?? `Bring the kernel of ${c.notebook} back to the end of cell [${cell}]`,
          () => this.rewind(c.notebook, cell, c.id),
          !!paused,
          true
        )
      );
    }
    li.appendChild(
      this.button(
        'Restore',
        paused ?? `Restore checkpoint ${c.id} into the running kernel of ${c.notebook}`,
        () => this.restore(c),
        !!paused,
        true
      )
    );
    // the server refuses to delete what a paused notebook resumes from (409): the row says so, not the dialog after
    const pinnedBy = resumesFrom(c.id, this.model.status);
    li.appendChild(
      this.button(
        'Delete',
        pinnedBy
          ? `Checkpoint ${c.id} is the one ${pinnedBy} resumes from: it cannot be deleted until ${pinnedBy} is resumed.`
          : `Delete checkpoint ${c.id} of ${c.notebook}`,
        () => this.delete(c),
        !!pinnedBy
      )
    );
    return li;
  }

  private button(
    label: string,
    description: string,
    act: () => Promise<void>,
    disabled = false,
    intoKernel = false
  ): HTMLButtonElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.disabled = disabled;
    if (intoKernel) {
      b.dataset.intoKernel = 'true'; // off while the kernel runs a cell (busyRows)
    }
    b.className = 'jp-Button jp-mod-styled jp-mod-reject jp-gkews-Checkpoint-action';
    b.textContent = label;
    b.title = description;
    b.setAttribute('aria-label', description);
    let acting = false; // its dialog is open, or its request under way
    b.addEventListener('click', () => {
      if (acting) {
        return; // the second click of a double click: it opened a second dialog behind the first
      }
      acting = true;
      void act().finally(() => {
        acting = false;
      });
    });
    return b;
  }

  private async restore(c: ICheckpoint): Promise<void> {
    const answer = await showDialog({
      title: 'Restore this checkpoint?',
      body: `The variables saved in checkpoint ${c.id} replace those of the same name in the running kernel of ${c.notebook}. Other variables are left alone.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Restore' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      const result = await this.model.api.restore(c.id, c.notebook);
      const failed = Object.keys(result.failed);
      toast(
        'success',
        `Restored ${plural(result.restored.length, 'variable')} into ${c.notebook}` +
          (failed.length ? `; not restored: ${failed.join(', ')}` : ''),
        { autoClose: 8000 }
      );
    } catch (error) {
      toast('error', `Restore failed: ${(error as Error).message}`, { autoClose: false });
      await this.refresh(); // a row deleted elsewhere (another tab, retention) goes
    }
  }

  private async rewind(notebook: string, cell: number, checkpoint: string): Promise<void> {
    const answer = await showDialog({
      title: `Rewind to after cell [${cell}]?`,
      body: `The variables of ${notebook}'s running kernel go back to what they were at the end of cell [${cell}]; variables defined after it are removed. The state before is checkpointed first, so the rewind can be undone.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Rewind' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      // this row's checkpoint: after a restart the kernel's own cell [N] is another one
      const r = await this.model.api.rewind(notebook, cell, checkpoint);
      const failed = Object.keys(r.failed);
      const parts = [
        r.changed.length ? `changed: ${r.changed.join(', ')}` : '',
        r.came_back.length ? `came back: ${r.came_back.join(', ')}` : '',
        r.removed.length ? `removed: ${r.removed.join(', ')}` : '',
        failed.length ? `could not: ${failed.join(', ')}` : ''
      ].filter(Boolean);
      toast(
        'success',
        `Rewound ${notebook} to after cell [${cell}]` +
          (parts.length ? `; ${parts.join('; ')}` : '') +
          (r.undo_cell !== null ? `. Undo: rewind to after cell [${r.undo_cell}]` : ''),
        { autoClose: 10000 }
      );
    } catch (error) {
      toast('error', `Rewind failed: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
  }

  private async delete(c: ICheckpoint): Promise<void> {
    const answer = await showDialog({
      title: 'Delete this checkpoint?',
      body: `Checkpoint ${c.id} of ${c.notebook} (${formatBytes(c.bytes)}) is deleted for good.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await this.model.api.deleteCheckpoint(c.id);
    } catch (error) {
      toast('error', `Delete failed: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
  }

  private listNode = document.createElement('div');
}
