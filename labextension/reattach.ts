/**
 * Keep notebook panels on the kernels the server resumed.
 *
 * With the local backend a pause shuts the kernels down. JupyterLab then
 * loses them in one of two ways: if its session poll (every 10 s) ran during
 * the pause, the session connection is disposed and the notebook says "No
 * Kernel"; if not, the session survives but its kernel connection has been
 * retrying (and may have given up). The server's resume brings back the same
 * session id and kernel id, so after it each panel is connected to that
 * session again - never to a freshly started kernel.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';

import { INotebookStatus, IStatus } from './types';

/** The notebooks a pause released: a panel opened for one of them must not start its own kernel. */
export function releasedPaths(status: IStatus | null): Set<string> {
  if (!status || (status.state !== 'paused' && status.state !== 'resuming' && status.state !== 'failed')) {
    return new Set();
  }
  return new Set(status.notebooks.filter(nb => nb.status === 'released').map(nb => nb.path));
}

/**
 * A panel opened (or restored on page load) while its notebook is paused
 * would start a fresh kernel under a new session and hide the one the resume
 * brings back: tell its session context not to start one.
 */
export function holdKernelStart(panel: NotebookPanel, status: IStatus | null): void {
  if (releasedPaths(status).has(panel.context.path)) {
    const sc = panel.sessionContext;
    sc.kernelPreference = { ...sc.kernelPreference, shouldStart: false, autoStartDefault: false };
  }
}

/** The session and kernel a panel was last connected to: the pause takes them away. */
const lastSession = new WeakMap<NotebookPanel, { sessionId?: string; kernelId?: string }>();

export function rememberSession(panel: NotebookPanel): void {
  const sc = panel.sessionContext;
  const note = () => {
    const session = sc.session;
    if (session) {
      lastSession.set(panel, { sessionId: session.id, kernelId: session.kernel?.id ?? lastSession.get(panel)?.kernelId });
    }
  };
  sc.sessionChanged.connect(note);
  sc.kernelChanged.connect(note);
  note();
}

/** Is this panel the one a paused notebook belonged to? By session, by kernel, or by path. */
function belongsTo(panel: NotebookPanel, nb: INotebookStatus): boolean {
  const last = lastSession.get(panel);
  return (
    (!!last?.sessionId && last.sessionId === nb.session_id) ||
    (!!last?.kernelId && last.kernelId === nb.kernel_id) ||
    panel.context.path === nb.path
  );
}

type SessionContextInternals = {
  _handleNewSession?: (session: Session.ISessionConnection | null) => unknown;
};

/** Connect one panel to its notebook's resumed session and kernel. */
export async function reattachPanel(
  panel: NotebookPanel,
  nb: INotebookStatus,
  sessions: Session.IManager
): Promise<void> {
  const sc: ISessionContext = panel.sessionContext;
  await sc.ready;
  // what the server has now: drops a stale session connection, keeps a live one
  await sessions.refreshRunning();
  const session = sc.session;
  const kernel = session?.kernel;
  if (session && kernel && !kernel.isDisposed && kernel.id === nb.kernel_id) {
    if (kernel.connectionStatus !== 'connected') {
      await kernel.reconnect();
    }
    return;
  }
  if (session && (!kernel || kernel.isDisposed) && session.id === nb.session_id) {
    session.dispose(); // its kernel connection gave up: start from a clean connection below
  } else if (session) {
    // another kernel (one started while the notebook was paused): swap it for the restored one
    await sc.changeKernel({ id: nb.kernel_id });
    return;
  }
  const model =
    (nb.session_id ? await sessions.findById(nb.session_id) : undefined) ??
    (await sessions.findByPath(nb.path));
  const internals = sc as unknown as SessionContextInternals;
  if (model && model.kernel?.id === nb.kernel_id && typeof internals._handleNewSession === 'function') {
    // the very session the server restored (same id), rather than a second one for the same kernel
    const restored = sessions.connectTo({ model });
    if (restored.path !== panel.context.path) {
      // The server's record may predate a rename. Fix it first: a session
      // context follows its session's path, and the document would follow.
      await restored.setPath(panel.context.path);
    }
    internals._handleNewSession(restored);
  } else {
    await sc.changeKernel({ id: nb.kernel_id });
  }
  restoreKernelPreference(panel);
}

function restoreKernelPreference(panel: NotebookPanel): void {
  const sc = panel.sessionContext;
  if (sc.kernelPreference.shouldStart === false) {
    sc.kernelPreference = { ...sc.kernelPreference, shouldStart: true };
  }
}

/** After a resume: every open panel of a resumed notebook, back on its kernel. */
export async function reattachAll(
  panels: Iterable<NotebookPanel>,
  status: IStatus,
  sessions: Session.IManager
): Promise<string[]> {
  const resumed = status.notebooks.filter(nb => nb.verdict && nb.verdict !== 'failed');
  const problems: string[] = [];
  const work: Promise<void>[] = [];
  for (const panel of panels) {
    const nb = resumed.find(nb => belongsTo(panel, nb));
    if (nb) {
      work.push(
        reattachPanel(panel, nb, sessions).catch(error => {
          problems.push(`${nb.path}: ${(error as Error).message}`);
        })
      );
    }
  }
  await Promise.all(work);
  return problems;
}
