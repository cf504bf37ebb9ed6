import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

/**
 * The jupyter-gkews frontend plugin.
 *
 * For now it only announces itself; the pause/resume button, the status bar
 * item and the checkpoint list come with the server REST API.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gkews:plugin',
  description:
    'Pause a GPU notebook and resume it from a Pod snapshot or an application checkpoint.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    console.log('jupyter-gkews is activated');
  }
};

export default plugin;
