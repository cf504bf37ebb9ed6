/**
 * "Ready" means ready: after a resume, every open notebook of a resumed
 * kernel is back on that kernel and has answered a kernel_info request over
 * its own connection. Until then the status item says which notebooks it is
 * reconnecting; a notebook that cannot be reconnected in time is named in a
 * notification.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';

import { names, notResumed, resumeOutcome } from './describe';
import { toast } from './toast';
import { GkewsModel } from './model';
import { belongsTo, kernelRuns, reattachPanel } from './reattach';
import { INotebookStatus, IStatus } from './types';

export interface IReadinessOptions {
  /** Milliseconds one kernel_info round trip may take. */
  probeTimeout: number;
  /** Milliseconds the reconnection of one notebook may take before the page gives up and says so. */
  reattachTimeout: number;
}

export const DEFAULT_READINESS: IReadinessOptions = { probeTimeout: 5000, reattachTimeout: 30000 };

/**
 * The notebooks of a resume that just ended (the server is active again and the notebooks carry verdicts):
 * those it brought back, those it failed whose checkpoint is kept, and those whose checkpoint it found gone
 * or unreadable (their kernel runs, without the saved state). A panel of the latter two is reconnected too,
 * to the kernel its notebook has now (for the first, the one the server's restarter brought back when it died
 * in its restore), so that its next cell runs rather than waiting for ever on the released kernel's
 * connection; its status says "not resumed" until a resume brings it back.
 */
export function resumedNotebooks(status: IStatus | null): INotebookStatus[] {
  if (!status || status.state !== 'active') {
    return [];
  }
  const again = notResumed(status);
  const withoutItsState = (nb: INotebookStatus) =>
    nb.verdict === 'failed' && nb.status === 'lost' && !!nb.kernel_id && !nb.deleted && !nb.found_missing;
  return status.notebooks.filter(
    nb => (nb.verdict && nb.verdict !== 'failed') || again.includes(nb.path) || withoutItsState(nb)
  );
}

export class Readiness {
  /**
   * Connect before any view of the model: the model's changed signal runs its
   * handlers in order, so "reconnecting" is set before anything renders "ready".
   */
  constructor(
    private model: GkewsModel,
    private panels: () => NotebookPanel[],
    private sessions: Session.IManager,
    private restored: Promise<unknown>,
    public options: IReadinessOptions = DEFAULT_READINESS
  ) {
    model.expectAttachment();
    model.changed.connect(this.onChanged, this);
    this.onChanged(); // the status the page read before this was wired
  }

  private onChanged(): void {
    const status = this.model.status;
    const firstRead = !this.seenStatus;
    this.seenStatus = this.seenStatus || !!status;
    // what display() calls a finished resume: a verdict, or a notebook deleted while paused (when that was
    // the only one, the page waited for ever for a reconnection nobody started, and Pause stayed disabled)
    if (!status || status.state !== 'active' || !status.notebooks.some(resumeOutcome)) {
      return;
    }
    // each resume once: a resume again of a notebook the first one failed is of the same pause cycle
    const resume = `${status.cycle}/${status.timeline.resume_requested ?? ''}`;
    if (this.handled === resume) {
      return;
    }
    this.handled = resume;
    const resumed = resumedNotebooks(status);
    this.model.setAttachment({ cycle: status.cycle, waiting: resumed.map(nb => nb.path), failed: {} });
    void this.reattach(status, resumed, !firstRead);
  }

  /** Reconnect the open panels of the resumed notebooks; swap kernels only if this page saw the pause. */
  private async reattach(status: IStatus, resumed: INotebookStatus[], sawPause: boolean): Promise<void> {
    const cycle = status.cycle;
    const resume = this.handled;
    await this.restored; // a reloaded page restores its notebooks first
    const remaining = new Map<string, number>(); // panels left per notebook: it may be open twice
    const failed: Record<string, string> = {};
    const work: Promise<void>[] = [];
    const update = () => {
      if (this.handled === resume) {
        this.model.setAttachment({ cycle, waiting: [...remaining.keys()], failed: { ...failed } });
      }
    };
    for (const panel of this.panels()) {
      const nb = resumed.find(nb => belongsTo(panel, nb));
      if (!nb) {
        continue;
      }
      remaining.set(nb.path, (remaining.get(nb.path) ?? 0) + 1);
      const options = {
        probeTimeout: this.options.probeTimeout,
        deadline: this.options.reattachTimeout,
        staleBefore: this.model.cycleSeenAt(cycle) ?? performance.now(),
        swap: sawPause,
        kernelRuns: (id: string) => kernelRuns(id, this.sessions.serverSettings)
      };
      work.push(
        reattachPanel(panel, nb, this.sessions, options)
          .then(
            () => undefined,
            error => {
              failed[nb.path] = (error as Error).message;
            }
          )
          .finally(() => {
            const left = (remaining.get(nb.path) ?? 1) - 1;
            if (left > 0) {
              remaining.set(nb.path, left);
            } else {
              remaining.delete(nb.path);
            }
            update();
          })
      );
    }
    update();
    await Promise.all(work);
    const broken = Object.keys(failed);
    if (broken.length && this.handled === resume) {
      const reasons = broken.map(p => failed[p]);
      toast(
        'error',
        `${names(broken)} could not be reconnected to ${broken.length === 1 ? 'its kernel' : 'their kernels'} within ${Math.round(this.options.reattachTimeout / 1000)} s ` +
          `(${reasons[0]}). Reload the page to reconnect.`,
        { autoClose: false }
      );
    }
  }

  private seenStatus = false;
  private handled: string | null = null;
}
