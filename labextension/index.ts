import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, IToolbarWidgetRegistry, Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';

import { GkewsApi } from './api';
import { addCommands, CommandIDs, PALETTE_CATEGORY } from './commands';
import { showDetails } from './details';
import { clip } from './describe';
import { GkewsModel } from './model';
import { connectNotifications } from './notify';
import { CheckpointPanel } from './panel';
import { holdKernelStart, reattachAll, rememberSession } from './reattach';
import { GkewsStatusItem } from './statusitem';
import { PauseResumeButton, TOOLBAR_ITEM } from './toolbar';

const PLUGIN_ID = 'jupyter-gkews:plugin';

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
  optional: [IStatusBar, ICommandPalette, IToolbarWidgetRegistry, ILabShell, ILayoutRestorer],
  activate: async (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    toolbarRegistry: IToolbarWidgetRegistry | null,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null
  ) => {
    const model = new GkewsModel(new GkewsApi(app.serviceManager.serverSettings));
    // Know the state before notebooks are restored on page load: a paused
    // notebook must not start a fresh kernel (see reattach.ts).
    await model.refresh();
    const watch = (panel: NotebookPanel) => {
      holdKernelStart(panel, model.status);
      rememberSession(panel);
    };
    tracker.widgetAdded.connect((_, panel) => watch(panel));
    tracker.forEach(watch);

    const panel = new CheckpointPanel(model);
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
      toolbarRegistry.addFactory('Notebook', TOOLBAR_ITEM, () => new PauseResumeButton(model, app.commands));
    }

    if (statusBar) {
      statusBar.registerStatusItem('jupyter-gkews:status', {
        item: new GkewsStatusItem(model, () => void showDetails(model)),
        align: 'left',
        rank: 5
      });
    }

    connectNotifications(model, app.commands);
    model.transition.connect(async (_, t) => {
      if (t.kind !== 'resumed') {
        return;
      }
      const problems = await reattachAll(
        tracker.filter(() => true),
        t.status,
        app.serviceManager.sessions
      );
      if (problems.length) {
        Notification.error(clip(`Could not reconnect to the resumed kernel: ${problems.join('; ')}. Reload the page.`), {
          autoClose: false
        });
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

export default plugin;
