import { Dialog, Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { CommandRegistry } from '@lumino/commands';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { showDialog } from './dialog';
import { doneElsewhere, names, plural } from './describe';
import { toast } from './toast';
import { showDetails } from './details';
import { pauseIcon, resumeIcon } from './icons';
import { GkewsModel } from './model';
import { pausesAlone } from './holdreason';

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
  const elsewhere =
    action === 'Pause' || action === 'Resume' ? doneElsewhere(action === 'Pause' ? 'pause' : 'resume', error) : null;
  if (elsewhere) {
    Notification.info(elsewhere, { autoClose: 5000 });
    return;
  }
  toast('error', `${action} failed: ${(error as Error).message}`, { autoClose: false });
}

/**
 * A cell still running when Pause is pressed: the pause would wait for it (up
 * to the server's busy timeout). Ask whether to interrupt it. Resolves to the
 * interrupt option, or null when the user cancels.
 */
async function askAboutRunningCells(
  tracker: INotebookTracker,
  notebooks: string[] | undefined,
  busyTimeout: number | undefined
): Promise<boolean | null> {
  const busy = tracker
    .filter(panel => panel.sessionContext.session?.kernel?.status === 'busy')
    .map(panel => panel.context.path)
    .filter(path => !notebooks || notebooks.includes(path));
  if (!busy.length) {
    return false;
  }
  const answer = await showDialog({
    title: 'A cell is still running',
    body:
      `${names(busy)} ${busy.length === 1 ? 'is' : 'are'} still running a cell. The pause can wait for ` +
      `${busy.length === 1 ? 'it' : 'them'} to finish, or interrupt ${busy.length === 1 ? 'it' : 'them'} and checkpoint what is there. ` +
      // the server's wait is bounded (GkewsApp.busy_timeout): say how long, and what happens after it
      `It waits up to ${waitLimit(busyTimeout)}; a cell still running ` +
      'then keeps its notebook running, not paused.',
    buttons: [
      Dialog.cancelButton(),
      Dialog.okButton({ label: 'Wait and pause', accept: true, actions: ['wait'] }),
      Dialog.warnButton({ label: 'Interrupt and pause', accept: true, actions: ['interrupt'] })
    ],
    // Enter must not interrupt someone's computation: it waits (a dialog's default is its last button)
    defaultButton: 1
  });
  if (!answer.button.accept) {
    return null;
  }
  return answer.button.actions.includes('interrupt');
}

/** The server's busy timeout in words; an older server's status has none: its default. */
function waitLimit(seconds: number | undefined): string {
  if (seconds === undefined || !Number.isFinite(seconds)) {
    return "the server's busy timeout (GkewsApp.busy_timeout, 60 s by default)";
  }
  const rounded = Math.round(seconds);
  const amount = rounded >= 120 && rounded % 60 === 0 ? `${rounded / 60} min` : `${rounded} s`;
  return `${amount} (the server's GkewsApp.busy_timeout)`;
}

/** The `notebooks` argument of a command: paths, or undefined for every notebook. */
function notebooksArg(args: ReadonlyPartialJSONObject): string[] | undefined {
  const paths = args.notebooks;
  return Array.isArray(paths) && paths.every(p => typeof p === 'string') ? (paths as string[]) : undefined;
}

export function addCommands(
  commands: CommandRegistry,
  model: GkewsModel,
  tracker: INotebookTracker,
  showCheckpoints: () => void
): void {
  model.changed.connect(() => commands.notifyCommandChanged());

  // args.notebooks: pause only these (a notebook's own toolbar, while the others are paused)
  const canPause = (args: ReadonlyPartialJSONObject) =>
    model.nextAction === 'pause' ||
    model.leftRunning.length > 0 ||
    tracker.find(panel => pausesAlone(model, panel)) !== undefined ||
    (notebooksArg(args) !== undefined && model.status?.state === 'paused' && !model.busy);
  commands.addCommand(CommandIDs.pause, {
    label: 'Pause GPU session',
    caption: 'Checkpoint every running kernel, then release them (and the GPU)',
    icon: pauseIcon,
    isEnabled: canPause,
    execute: async args => {
      if (!canPause(args)) {
        // run as a command while it is off (the buttons, menus and key bindings are off then): asking
        // about running cells would only lead to a refusal
        Notification.info(`The GPU session is ${model.display}: nothing to pause now.`, { autoClose: 5000 });
        return;
      }
      const notebooks = notebooksArg(args);
      const interrupt = await askAboutRunningCells(tracker, notebooks, model.status?.busy_timeout);
      if (interrupt === null) {
        return;
      }
      try {
        await model.pause(notebooks, interrupt);
      } catch (error) {
        reportError('Pause', error);
      }
    }
  });

  commands.addCommand(CommandIDs.resume, {
    label: 'Resume GPU session',
    caption: 'Bring the paused kernels back, verify them or restore them from their checkpoints',
    icon: resumeIcon,
    isEnabled: () =>
      model.nextAction === 'resume' || model.nextAction === 'queue-resume' || model.stillToResume.length > 0,
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
    isEnabled: () => !!tracker.currentWidget?.sessionContext.session?.kernel && model.connected && !model.busy,
    execute: async () => {
      const panel = tracker.currentWidget;
      if (!panel) {
        return;
      }
      const path = panel.context.path;
      try {
        const c = await model.api.checkpointNow(path);
        const skipped = Object.keys(c.skipped);
        toast(
          'success',
          `Checkpoint ${c.id} of ${path}: ${plural(c.saved.length, 'variable')} saved` +
            (skipped.length ? `; ${names(skipped)} ${skipped.length === 1 ? 'was' : 'were'} not saved.` : '.'),
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
