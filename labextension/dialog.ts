import { Dialog } from '@jupyterlab/apputils';

/**
 * A JupyterLab dialog that a double click does not dismiss. A button that
 * opens a dialog (Pause with a cell running, a checkpoint's Restore, Rewind,
 * Delete) puts the dialog under the pointer between the two clicks of a double
 * click: the second one landed on the backdrop, which cancels, so the dialog
 * flashed and nothing happened. A click outside the dialog whose `detail` says
 * it is the second (or third) of a quick series is ignored; a single click
 * outside, Escape and the buttons work as in any JupyterLab dialog.
 */
class SteadyDialog<T> extends Dialog<T> {
  handleEvent(event: Event): void {
    if ((event.type === 'click' || event.type === 'mousedown') && (event as MouseEvent).detail > 1) {
      const content = this.node.querySelector('.jp-Dialog-content');
      if (content && !content.contains(event.target as Node)) {
        event.stopPropagation();
        event.preventDefault();
        return;
      }
    }
    super.handleEvent(event);
  }
}

/** `showDialog` of @jupyterlab/apputils, with a dialog a double click leaves open. */
export function showDialog<T>(options: Partial<Dialog.IOptions<T>> = {}): Promise<Dialog.IResult<T>> {
  return new SteadyDialog<T>(options).launch();
}
