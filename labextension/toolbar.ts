import { NotebookPanel } from '@jupyterlab/notebook';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { GkewsModel } from './model';
import { CommandIDs } from './commands';
import { pauseIcon, resumeIcon, waitIcon } from './icons';
import { pausesAlone, resumesAlone } from './holdreason';

/** The name under which settings place the button in the notebook toolbar. */
export const TOOLBAR_ITEM = 'gkews-pause-resume';

/**
 * The notebook toolbar button. Its label, icon and tooltip follow the state:
 * Pause when active, Resume when paused, disabled while a transition runs.
 * While the session is paused, the button of a notebook whose own kernel runs
 * (opened since the pause, or left running by it) pauses that notebook.
 */
export class PauseResumeButton extends Widget {
  constructor(
    private model: GkewsModel,
    private commands: CommandRegistry,
    private panel?: NotebookPanel
  ) {
    super({ node: document.createElement('button') });
    this.addClass('jp-ToolbarButtonComponent');
    this.addClass('jp-gkews-PauseButton');
    const button = this.node as HTMLButtonElement;
    button.type = 'button';
    button.appendChild(this.iconNode);
    this.labelNode.className = 'jp-ToolbarButtonComponent-label';
    button.appendChild(this.labelNode);
    button.addEventListener('click', () => {
      if (button.getAttribute('aria-disabled') === 'true') {
        return; // waiting (pausing, resuming): the button keeps the keyboard focus, and does nothing
      }
      if (this.resumesAlone()) {
        void this.commands.execute(CommandIDs.resume);
        return;
      }
      if (this.pausesAlone()) {
        void this.commands.execute(CommandIDs.pause, { notebooks: [this.panel!.context.path] });
        return;
      }
      const action = this.model.nextAction;
      if (action) {
        void this.commands.execute(action === 'pause' ? CommandIDs.pause : CommandIDs.resume);
      }
    });
    model.changed.connect(this.render, this);
    panel?.sessionContext.kernelChanged.connect(this.render, this);
    this.render();
  }

  /** This button's notebook was not brought back by the last resume (its checkpoint is kept). */
  private resumesAlone(): boolean {
    return !!this.panel && resumesAlone(this.model, this.panel);
  }

  /** This button's notebook runs a kernel of its own while the others are paused. */
  private pausesAlone(): boolean {
    return !!this.panel && pausesAlone(this.model, this.panel);
  }

  private render(): void {
    const button = this.node as HTMLButtonElement;
    const again = this.resumesAlone();
    const alone = !again && this.pausesAlone();
    const action = again ? 'resume' : alone ? 'pause' : this.model.nextAction;
    const state = this.model.display;
    let label: string;
    let tooltip: string;
    if (again) {
      label = 'Resume';
      tooltip = 'The last resume did not bring this notebook back: resume it again from its checkpoint';
      resumeIcon.element({ container: this.iconNode });
    } else if (alone) {
      label = 'Pause';
      tooltip = 'Pause this notebook too: checkpoint its kernel, then release it (the others are paused already)';
      pauseIcon.element({ container: this.iconNode });
    } else if (action === 'pause') {
      label = 'Pause';
      tooltip = 'Pause the GPU session: checkpoint every kernel, then release them';
      pauseIcon.element({ container: this.iconNode });
    } else if (action === 'resume') {
      label = 'Resume';
      tooltip = 'Resume the GPU session: bring the kernels back and verify or restore them';
      resumeIcon.element({ container: this.iconNode });
    } else if (action === 'queue-resume') {
      label = 'Resume after pause';
      tooltip = 'The pause is still finishing: press to resume as soon as it is done';
      resumeIcon.element({ container: this.iconNode });
    } else if (this.model.resumeQueued) {
      label = 'Resume queued';
      tooltip = 'The resume is posted as soon as the pause is done';
      waitIcon.element({ container: this.iconNode });
    } else if (state === 'reconnecting') {
      label = 'Reconnecting…';
      tooltip = 'Wait: the notebooks are being reconnected to their resumed kernels';
      waitIcon.element({ container: this.iconNode });
    } else {
      label = state === 'offline' ? 'Offline' : state === 'pausing' ? 'Pausing…' : 'Resuming…';
      tooltip =
        state === 'offline'
          ? 'The Jupyter server does not answer; pause and resume come back with it'
          : `Wait: the session is ${state}`;
      waitIcon.element({ container: this.iconNode });
    }
    this.labelNode.textContent = label;
    // aria-disabled, not disabled: a disabled button drops the keyboard focus, so Enter on Pause sent it into the
    // notebook, and the toolbar's own tabindex kept Tab from reaching the button again once it said Resume
    button.setAttribute('aria-disabled', String(action === null));
    button.title = tooltip;
    button.setAttribute('aria-label', `${label}: ${tooltip}`);
    button.dataset.gkewsAction = action ?? 'none';
  }

  private iconNode = document.createElement('span');
  private labelNode = document.createElement('span');
}
