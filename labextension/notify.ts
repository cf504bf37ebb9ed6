import { Notification } from '@jupyterlab/apputils';

import { CommandIDs } from './commands';
import { clip, transitionMessage } from './describe';
import { GkewsModel, ITransition } from './model';
import { CommandRegistry } from '@lumino/commands';

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
  model.queuedResumeFailed.connect((_, why) => {
    Notification.error(clip(`The queued resume was not posted: ${why}.`), { autoClose: false, actions: [details] });
  });
  model.transition.connect((_, t: ITransition) => {
    switch (t.kind) {
      case 'paused':
        Notification.success(transitionMessage('paused', t.status), {
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
        (worrying ? Notification.warning : Notification.success)(transitionMessage('resumed', t.status), {
          autoClose: worrying ? false : 10000,
          actions: [details]
        });
        break;
      }
      case 'failed':
        Notification.error(transitionMessage('failed', t.status), {
          autoClose: false,
          actions: [details]
        });
        break;
      case 'reconnected':
        Notification.info(`The Jupyter server answers again; the GPU session is ${model.display}.`, {
          autoClose: 5000
        });
        break;
    }
  });
}
