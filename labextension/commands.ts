import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { CommandRegistry } from '@lumino/commands';

import { clip } from './describe';
import { showDetails } from './details';
import { pauseIcon, resumeIcon } from './icons';
import { GkewsModel } from './model';

export namespace CommandIDs {
  export const pause = 'gkews:pause';
  export const resume = 'gkews:resume';
  export const checkpointNow = 'gkews:checkpoint-now';
  export const showStatus = 'gkews:show-status';
  export const showCheckpoints = 'gkews:show-checkpoints';
}

export const PALETTE_CATEGORY = 'GPU session';

/** Report a refused or failed action with the server's message, which names the fix. */
function reportError(action: string, error: unknown): void {
  Notification.error(clip(`${action} failed: ${(error as Error).message}`), { autoClose: false });
}

export function addCommands(
  commands: CommandRegistry,
  model: GkewsModel,
  tracker: INotebookTracker,
  showCheckpoints: () => void
): void {
  model.changed.connect(() => commands.notifyCommandChanged());

  commands.addCommand(CommandIDs.pause, {
    label: 'Pause GPU session',
    caption: 'Checkpoint every running kernel, then release them (and the GPU)',
    icon: pauseIcon,
    isEnabled: () => model.nextAction === 'pause',
    execute: async () => {
      try {
        await model.pause();
      } catch (error) {
        reportError('Pause', error);
      }
    }
  });

  commands.addCommand(CommandIDs.resume, {
    label: 'Resume GPU session',
    caption: 'Bring the paused kernels back, verify them or restore them from their checkpoints',
    icon: resumeIcon,
    isEnabled: () => model.nextAction === 'resume',
    execute: async () => {
      try {
        await model.resume();
      } catch (error) {
        reportError('Resume', error);
      }
    }
  });

  commands.addCommand(CommandIDs.checkpointNow, {
    label: 'Checkpoint the current notebook now',
    caption: "Save the current notebook's kernel state as a checkpoint, without pausing",
    isEnabled: () =>
      !!tracker.currentWidget?.sessionContext.session?.kernel && model.connected && !model.busy,
    execute: async () => {
      const panel = tracker.currentWidget;
      if (!panel) {
        return;
      }
      const path = panel.context.path;
      try {
        const c = await model.api.checkpointNow(path);
        const skipped = Object.keys(c.skipped);
        Notification.success(
          clip(
            `Checkpoint ${c.id} of ${path}: ${c.saved.length} variable(s) saved` +
              (skipped.length ? `; skipped: ${skipped.join(', ')}` : '')
          ),
          { autoClose: 8000 }
        );
        showCheckpoints();
      } catch (error) {
        reportError('Checkpoint', error);
      }
    }
  });

  commands.addCommand(CommandIDs.showStatus, {
    label: 'Show GPU session status',
    caption: 'The timeline of the last pause/resume, per-notebook verdicts and next steps',
    execute: () => showDetails(model)
  });

  commands.addCommand(CommandIDs.showCheckpoints, {
    label: 'Show checkpoints',
    caption: 'The list of checkpoints per notebook, with restore and delete',
    execute: () => showCheckpoints()
  });
}
