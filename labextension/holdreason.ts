/**
 * When a cell run in a notebook now would be lost: its kernel is released or
 * coming back (heldcells.ts holds such a cell until the notebook is ready).
 * No DOM here, so the jest tests run it as it is.
 */
import { NotebookPanel } from '@jupyterlab/notebook';

import { GkewsModel, LEFT_RUNNING } from './model';
import { belongsTo } from './reattach';
import { INotebookStatus } from './types';

/** Why a cell run in this panel now would be lost, or null when it can run. */
export function holdReason(model: GkewsModel, panel: NotebookPanel): string | null {
  const status = model.status;
  const nb = status?.notebooks.find(n => belongsTo(panel, n));
  if (!status || !nb || LEFT_RUNNING.includes(nb.status) || nb.status === 'lost') {
    // not a notebook of the pause, one it left running (its kernel runs), or one it lost (its kernel stopped
    // with the server before its checkpoint: no resume brings it back, so a cell starts a new one)
    return null;
  }
  if (status.state === 'pausing') {
    return 'is being paused'; // a cell sent now waits behind the checkpoint's hold, and the release ends it
  }
  if (status.state === 'paused') {
    return 'is paused';
  }
  if (status.state === 'resuming') {
    return 'is being resumed';
  }
  const attachment = model.attachment;
  const reconnecting = attachment ? attachment.waiting.includes(nb.path) : attachment === null && !!nb.verdict;
  if (status.state === 'active' && reconnecting) {
    return 'is being reconnected to its restored kernel';
  }
  // a notebook whose resume failed runs its cells in the kernel it has (the page reconnects it): holding them
  // would trap a notebook whose every resume fails; the status bar and its toolbar say to resume it
  return null;
}

/** Whether this panel's own toolbar button resumes its notebook (GkewsModel.resumesAlone). */
export function resumesAlone(model: GkewsModel, panel: NotebookPanel): boolean {
  return !panel.isDisposed && model.resumesAlone(model.status?.notebooks.find(n => belongsTo(panel, n)));
}

/**
 * Whether the kernel that held cells were sent to is the one that runs now,
 * so that it runs them itself: the same process came back (live-verified, or
 * restored in place), or a failed pause let it go before it was released.
 */
export function kernelLivedOn(nb: INotebookStatus | undefined, failed: boolean): boolean {
  if (!nb) {
    return false;
  }
  if (failed) {
    return nb.status !== 'released' && nb.status !== 'failed' && !nb.verdict;
  }
  return nb.verdict === 'live-verified' || nb.same_process === true;
}

/**
 * Whether this panel's own Pause pauses its notebook alone: the session is
 * paused, and the panel's kernel runs outside the pause (GkewsModel.pausesAlone).
 */
export function pausesAlone(model: GkewsModel, panel: NotebookPanel): boolean {
  if (panel.isDisposed) {
    return false;
  }
  const nb = model.status?.notebooks.find(n => belongsTo(panel, n));
  return model.pausesAlone(nb, !!panel.sessionContext.session?.kernel);
}
