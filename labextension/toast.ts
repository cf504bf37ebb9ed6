import { Dialog, Notification } from '@jupyterlab/apputils';

import { showDialog } from './dialog';
import { clip } from './describe';

/** JupyterLab truncates a notification's message past this many characters. */
export const TOAST_LIMIT = 140;

type Kind = 'success' | 'info' | 'warning' | 'error';

/**
 * A notification whose whole text stays readable. A message that names a
 * long notebook path lost its end to JupyterLab's 140 characters, and the end
 * is where the server says what was not restored or how to fix it: past the
 * limit the toast shows the beginning and offers "Show all".
 */
export function toast(kind: Kind, text: string, options: Notification.IOptions<null> = {}): string {
  const actions = [...(options.actions ?? [])];
  if (text.length > TOAST_LIMIT) {
    actions.unshift({
      label: 'Show all',
      caption: 'Show the whole message',
      callback: () =>
        void showDialog({ title: 'GPU session', body: text, buttons: [Dialog.okButton({ label: 'Close' })] })
    });
  }
  return Notification[kind](clip(text, TOAST_LIMIT), { ...options, actions });
}
