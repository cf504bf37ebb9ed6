import { Notification } from '@jupyterlab/apputils';

import { CommandIDs } from './commands';
import { pausedNothingMore, shutDownAllNote, transitionMessage } from './describe';
import { GkewsModel, ITransition } from './model';
import { toast } from './toast';
import { CommandRegistry } from '@lumino/commands';

/** JupyterLab's Kernel menu "Shut Down All Kernels…" (its running panel's button runs no command). */
const SHUT_DOWN_ALL = 'kernelmenu:shutdownAll';

/**
 * Notifications when a pause or a resume finishes (with the verdict) and on
 * failures (with the next step). Each offers the details.
 */
export function connectNotifications(model: GkewsModel, commands: CommandRegistry): void {
  const details = {
    label: 'Details',
    caption: 'Show the timeline, verdicts and next steps',
    callback: () => void commands.execute(CommandIDs.showStatus)
  };
  // JupyterLab's own dialog asks to shut down "the running kernel": say what it does to a paused notebook
  commands.commandExecuted.connect((_, args) => {
    const note = args.id === SHUT_DOWN_ALL ? shutDownAllNote(model.status) : null;
    if (note) {
      toast('info', note, { autoClose: 15000 });
    }
  });
  model.queuedResumeFailed.connect((_, why) => {
    toast('error', `The queued resume was not posted: ${why}.`, { autoClose: false, actions: [details] });
  });
  model.transition.connect((_, t: ITransition) => {
    switch (t.kind) {
      case 'paused':
        // a pause that paused nothing more (its notebooks were busy) is no success
        toast(pausedNothingMore(t.status) ? 'warning' : 'success', transitionMessage('paused', t.status), {
          autoClose: 8000,
          actions: [details]
        });
        break;
      case 'resumed': {
        const worrying = t.status.notebooks.some(
          nb =>
            nb.verdict === 'failed' ||
            Object.keys(nb.failed ?? {}).length ||
            Object.keys(nb.skipped_at_save ?? {}).length
        );
        toast(worrying ? 'warning' : 'success', transitionMessage('resumed', t.status), {
          autoClose: worrying ? false : 10000,
          actions: [details]
        });
        break;
      }
      case 'failed':
        toast('error', transitionMessage('failed', t.status), { autoClose: false, actions: [details] });
        break;
      case 'reconnected':
        Notification.info(`The Jupyter server answers again; the GPU session is ${model.display}.`, {
          autoClose: 5000
        });
        break;
    }
  });
}
