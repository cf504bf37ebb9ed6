/**
 * When a cell run in a notebook now would be lost: its kernel is released or
 * coming back (heldcells.ts holds such a cell until the notebook is ready).
 * No DOM here, so the jest tests run it as it is.
 */
import { NotebookPanel } from '@jupyterlab/notebook';

import { GkewsModel } from './model';
import { belongsTo } from './reattach';

/** Why a cell run in this panel now would be lost, or null when it can run. */
export function holdReason(model: GkewsModel, panel: NotebookPanel): string | null {
  const status = model.status;
  const nb = status?.notebooks.find(n => belongsTo(panel, n));
  if (!status || !nb) {
    return null; // not a notebook of the pause: its kernel runs
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
  return null;
}
