import { ILabShell, ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, IToolbarWidgetRegistry } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { GkewsApi } from './api';
import { addCommands, CommandIDs, PALETTE_CATEGORY } from './commands';
import { showDetails } from './details';
import { DEFAULT_TIMINGS, GkewsModel } from './model';
import { connectNotifications } from './notify';
import { CheckpointPanel } from './panel';
import { HeldCells } from './heldcells';
import { DEFAULT_READINESS, Readiness } from './readiness';
import { holdKernelStart, rememberSession } from './reattach';
import { GkewsStatusItem } from './statusitem';
import { PauseResumeButton, TOOLBAR_ITEM } from './toolbar';

const PLUGIN_ID = 'jupyter-gkews:plugin';

const INTERRUPT_COMMANDS = ['notebook:interrupt-kernel', 'kernelmenu:interrupt'];

/**
 * The jupyter-gkews frontend: a Pause/Resume notebook toolbar button, a status
 * bar item, notifications, a checkpoint sidebar, and palette commands, all
 * showing what `GET gkews/status` says.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Pause a GPU notebook and resume it from a Pod snapshot or an application checkpoint.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar, ICommandPalette, IToolbarWidgetRegistry, ILabShell, ILayoutRestorer, ISettingRegistry],
  activate: async (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    toolbarRegistry: IToolbarWidgetRegistry | null,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    settingRegistry: ISettingRegistry | null
  ) => {
    const model = new GkewsModel(new GkewsApi(app.serviceManager.serverSettings));
    // First, before any view: "ready" waits for the open notebooks to be reconnected.
    const readiness = new Readiness(model, () => tracker.filter(() => true), app.serviceManager.sessions, app.restored);
    // After it: a cell run while its notebook is paused or coming back waits for "ready", then runs.
    const heldCells = new HeldCells(model, () => tracker.filter(() => true));
    if (settingRegistry) {
      void settingRegistry.load(PLUGIN_ID).then(
        settings => {
          const apply = () => applySettings(settings, model, readiness);
          settings.changed.connect(apply);
          apply();
        },
        error => console.warn('jupyter-gkews: settings not loaded, using the defaults', error)
      );
    }
    // Before the first read: a reloaded page announces what ended during the reload (model.ts, lastSeen).
    connectNotifications(model, app.commands);
    // Know the state before notebooks are restored on page load: a paused
    // notebook must not start a fresh kernel (see reattach.ts).
    await model.refresh();
    const watch = (panel: NotebookPanel) => {
      heldCells.guard(panel);
      holdKernelStart(panel, model.status);
      rememberSession(panel);
    };
    tracker.widgetAdded.connect((_, panel) => watch(panel));
    tracker.forEach(watch);
    // a panel open all along is held too, from the moment the pause releases its notebook
    model.changed.connect(() => tracker.forEach(panel => holdKernelStart(panel, model.status)));

    const panel = new CheckpointPanel(model, app.serviceManager.sessions, app.serviceManager.contents);
    const showCheckpoints = () => {
      if (labShell) {
        labShell.activateById(panel.id);
      }
      void panel.refresh();
    };
    if (labShell) {
      labShell.add(panel, 'right', { rank: 600 });
      restorer?.add(panel, panel.id);
    }

    addCommands(app.commands, model, tracker, showCheckpoints);
    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: PALETTE_CATEGORY });
      }
    }

    if (toolbarRegistry) {
      toolbarRegistry.addFactory(
        'Notebook',
        TOOLBAR_ITEM,
        widget => new PauseResumeButton(model, app.commands, widget instanceof NotebookPanel ? widget : undefined)
      );
    }

    if (statusBar) {
      statusBar.registerStatusItem('jupyter-gkews:status', {
        item: new GkewsStatusItem(model, () => void showDetails(model)),
        align: 'left',
        rank: 5
      });
    }

    // the notebook toolbar's and the Kernel menu's Interrupt: a paused notebook has no kernel to interrupt
    app.commands.commandExecuted.connect((_, args) => {
      if (INTERRUPT_COMMANDS.includes(args.id) && tracker.currentWidget) {
        heldCells.cancel(tracker.currentWidget);
      }
    });

    model.start();
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') {
        model.poke();
      }
    });
  }
};

/** The timings from the settings (schema/plugin.json), in milliseconds. */
function applySettings(settings: ISettingRegistry.ISettings, model: GkewsModel, readiness: Readiness): void {
  const ms = (key: string, fallback: number) => {
    const value = settings.get(key).composite;
    return typeof value === 'number' && value > 0 ? value : fallback;
  };
  model.configure({
    idleInterval: ms('statusInterval', DEFAULT_TIMINGS.idleInterval),
    busyInterval: ms('transitionInterval', DEFAULT_TIMINGS.busyInterval),
    retryInterval: ms('retryInterval', DEFAULT_TIMINGS.retryInterval),
    maxBackoff: ms('maxRetryInterval', DEFAULT_TIMINGS.maxBackoff)
  });
  readiness.options = {
    probeTimeout: ms('kernelInfoTimeout', DEFAULT_READINESS.probeTimeout),
    reattachTimeout: ms('reconnectTimeout', DEFAULT_READINESS.reattachTimeout)
  };
}

export default plugin;
