/**
 * Notifications keep their whole text: JupyterLab truncates a message past
 * 140 characters, and a long notebook path pushed out the end of it (what was
 * not restored, the fix).
 */
const shown: { kind: string; message: string; options: any }[] = [];
const dialogs: any[] = [];
const notify = (kind: string) => (message: string, options: any) => {
  shown.push({ kind, message, options });
  return `n${shown.length}`;
};
jest.mock('@jupyterlab/apputils', () => ({
  Dialog: { okButton: (o: any) => o },
  Notification: { success: notify('success'), info: notify('info'), warning: notify('warning'), error: notify('error') }
}));
jest.mock('../dialog', () => ({ showDialog: (options: any) => dialogs.push(options) && Promise.resolve() }));

import { toast, TOAST_LIMIT } from '../toast';

describe('toast', () => {
  beforeEach(() => {
    shown.length = 0;
    dialogs.length = 0;
  });

  it('shows a short message as it is, with the actions it was given', () => {
    const details = { label: 'Details', callback: () => undefined };
    toast('success', 'Restored 2 variables into a.ipynb', { actions: [details] });
    expect(shown).toEqual([
      { kind: 'success', message: 'Restored 2 variables into a.ipynb', options: { actions: [details] } }
    ]);
  });

  it('offers the whole of a long message where JupyterLab would cut its end', () => {
    const path = `projects/${'very-long-folder-name/'.repeat(6)}experiment.ipynb`;
    const text = `Restored 3 variables into ${path}; not restored: model, optimizer`;
    expect(text.length).toBeGreaterThan(TOAST_LIMIT);
    toast('warning', text, { autoClose: false });
    const [{ kind, message, options }] = shown;
    expect(kind).toBe('warning');
    expect(message.length).toBeLessThanOrEqual(TOAST_LIMIT);
    expect(text.startsWith(message.slice(0, -1))).toBe(true);
    expect(options.autoClose).toBe(false);
    expect(options.actions.map((a: any) => a.label)).toEqual(['Show all']);
    options.actions[0].callback();
    expect(dialogs).toHaveLength(1);
    expect(dialogs[0].body).toBe(text); // all of it, the end included
  });
});
