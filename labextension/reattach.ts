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
import { KernelAPI, ServerConnection, Session } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';

import { INotebookStatus, IStatus } from './types';

/** The notebooks a pause released: a panel opened for one of them must not start its own kernel. */
export function releasedPaths(status: IStatus | null): Set<string> {
  if (!status || (status.state !== 'paused' && status.state !== 'resuming' && status.state !== 'failed')) {
    return new Set();
  }
  return new Set(status.notebooks.filter(nb => nb.status === 'released').map(nb => nb.path));
}

/** The kernel preference a panel had before its notebook was released. */
const heldPreference = new WeakMap<NotebookPanel, ISessionContext.IKernelPreference>();

/**
 * A panel of a notebook the pause released - opened or restored while it is
 * paused, or open all along, its session gone - would start a fresh kernel
 * under a new session when a cell runs (JupyterLab starts one for a notebook
 * without a kernel): a kernel the pause never saw, on the GPU it gave back,
 * hiding the one the resume brings back. Its session context is told not to
 * start one while released, and gets its own preference back once the panel
 * has a kernel again after the resume. Called on every status change.
 */
export function holdKernelStart(panel: NotebookPanel, status: IStatus | null): void {
  const sc = panel.sessionContext;
  if (releasedPaths(status).has(panel.context.path)) {
    if (!heldPreference.has(panel)) {
      heldPreference.set(panel, sc.kernelPreference);
      sc.kernelPreference = { ...sc.kernelPreference, shouldStart: false, autoStartDefault: false };
    }
    return;
  }
  if (status?.state === 'active' && sc.session?.kernel) {
    giveBackPreference(panel);
  }
}

/** The panel has its kernel again: its own kernel preference comes back. */
function giveBackPreference(panel: NotebookPanel): void {
  const own = heldPreference.get(panel);
  if (own) {
    heldPreference.delete(panel);
    panel.sessionContext.kernelPreference = own;
  }
}

/** The session and kernel a panel was last connected to: the pause takes them away. */
const lastSession = new WeakMap<NotebookPanel, { sessionId?: string; kernelId?: string }>();
/** When the panel's kernel socket last opened (performance.now()). */
const lastConnected = new WeakMap<NotebookPanel, number>();

export function rememberSession(panel: NotebookPanel): void {
  const sc = panel.sessionContext;
  const note = () => {
    const session = sc.session;
    if (session) {
      lastSession.set(panel, {
        sessionId: session.id,
        kernelId: session.kernel?.id ?? lastSession.get(panel)?.kernelId
      });
    }
  };
  sc.sessionChanged.connect(note);
  sc.kernelChanged.connect(note);
  sc.connectionStatusChanged.connect((_, status) => {
    if (status === 'connected') {
      lastConnected.set(panel, performance.now());
    }
  });
  note();
}

/** Is this panel the one a paused notebook belonged to? By session, by kernel, or by path. */
export function belongsTo(panel: NotebookPanel, nb: INotebookStatus): boolean {
  const last = lastSession.get(panel);
  return (
    (!!last?.sessionId && last.sessionId === nb.session_id) ||
    (!!last?.kernelId && last.kernelId === nb.kernel_id) ||
    panel.context.path === nb.path
  );
}

/**
 * JupyterLab's private SessionContext._handleNewSession: the only way to give
 * a notebook the very session the server restored (its public changeKernel
 * starts a second session for the same kernel). Guarded by
 * labextension/__tests__/sessioncontext.spec.ts against the JupyterLab
 * versions package.json allows; without it, changeKernel is the fallback.
 */
type SessionContextInternals = {
  _handleNewSession?: (session: Session.ISessionConnection | null) => unknown;
};

export interface IReattachOptions {
  /** Milliseconds one kernel_info round trip (or one socket reconnection) may take. */
  probeTimeout: number;
  /** Milliseconds the whole reconnection of one notebook may take. */
  deadline: number;
  /**
   * performance.now() when this page first saw the cycle: a socket that opened
   * before may still be bound to the released kernel process.
   */
  staleBefore: number;
  /** Swap a panel that another kernel took over back to the resumed one (false on a page that loaded after the resume). */
  swap: boolean;
  /** Whether the server still runs this kernel (kernelRuns below, or a test's own). */
  kernelRuns: (kernelId: string) => Promise<boolean>;
}

/**
 * Whether the server runs the kernel: a resumed kernel shut down since (a page reloaded later still reads
 * the cycle's verdicts) has nothing to reconnect to. An answer other than 404 counts as running: the
 * reconnection then tries, and says why it could not.
 */
export async function kernelRuns(kernelId: string, settings?: ServerConnection.ISettings): Promise<boolean> {
  try {
    return (await KernelAPI.getKernelModel(kernelId, settings)) !== undefined;
  } catch {
    return true;
  }
}

/** A promise that rejects with `what` after `ms` milliseconds. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    const limit = ms >= 1000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms)} ms`;
    timer = setTimeout(() => reject(new Error(`${what} within ${limit}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Put the panel's session context on the resumed session and kernel; false when it is not ours to touch. */
async function attachSession(
  panel: NotebookPanel,
  nb: INotebookStatus,
  sessions: Session.IManager,
  swap: boolean
): Promise<boolean> {
  const sc: ISessionContext = panel.sessionContext;
  const session = sc.session;
  const kernel = session?.kernel;
  if (session && kernel && !kernel.isDisposed && kernel.id === nb.kernel_id) {
    return true;
  }
  if (!swap && session && kernel && !kernel.isDisposed) {
    return false; // the user's own choice of kernel on a page that did not see the pause
  }
  if (session && (!kernel || kernel.isDisposed) && session.id === nb.session_id) {
    session.dispose(); // its kernel connection gave up: start from a clean connection below
  } else if (session) {
    // another kernel (one started while the notebook was paused): swap it for the restored one
    await sc.changeKernel({ id: nb.kernel_id });
    return true;
  }
  const model =
    (nb.session_id ? await sessions.findById(nb.session_id) : undefined) ?? (await sessions.findByPath(nb.path));
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
  return true;
}

/**
 * Connect one panel to its notebook's resumed kernel and prove it: a
 * kernel_info request must come back over the panel's own connection. A
 * socket that opened before the resume (it may still be bound to the released
 * process, while the page believes it connected), or one that does not
 * answer, is replaced by a fresh one. Rejects, with the reason, when the
 * kernel did not answer within the deadline. Resolves false for a panel that
 * is not on the resumed kernel and is not ours to move, or whose kernel no
 * longer runs.
 */
export async function reattachPanel(
  panel: NotebookPanel,
  nb: INotebookStatus,
  sessions: Session.IManager,
  options: IReattachOptions
): Promise<boolean> {
  const sc: ISessionContext = panel.sessionContext;
  const end = performance.now() + options.deadline;
  const left = () => Math.max(end - performance.now(), 0);
  if (!nb.kernel_id || !(await within(options.kernelRuns(nb.kernel_id), left(), 'the server did not answer'))) {
    // Shut down since the resume: the panel is the user's, to start a kernel as JupyterLab does (waiting
    // for it to load first meant waiting on the kernel dialog the panel shows, until the deadline).
    return false;
  }
  await within(sc.ready, left(), 'the notebook did not finish loading');
  // what the server has now: drops a stale session connection, keeps a live one
  await within(sessions.refreshRunning(), left(), 'the server did not list its sessions');
  let failedBefore = false;
  const attempt = async (): Promise<boolean> => {
    try {
      if (!(await within(attachSession(panel, nb, sessions, options.swap), left(), 'it could not be attached'))) {
        return false;
      }
      giveBackPreference(panel);
      const kernel = sc.session?.kernel;
      if (!kernel || kernel.isDisposed) {
        throw new Error('its kernel connection was closed');
      }
      const probe = Math.max(Math.min(options.probeTimeout, left()), 1);
      const stale = (lastConnected.get(panel) ?? -Infinity) <= options.staleBefore;
      if (failedBefore || stale || kernel.connectionStatus !== 'connected') {
        await within(kernel.reconnect(), probe, 'its socket did not reconnect');
      }
      await within(kernel.requestKernelInfo(), probe, 'its kernel did not answer');
      if (kernel.status === 'unknown') {
        // A reconnected socket says "Unknown" until a status message it tracks comes, and JupyterLab
        // tracks none of kernel_info's (untracked_message_types). An empty silent execute is tracked,
        // runs no hook (post_run_cell is not fired) and takes no execution count: the indicator says Idle.
        await within(
          kernel.requestExecute({ code: '', silent: true, store_history: false }).done,
          probe,
          'its kernel did not answer'
        );
      }
      return true;
    } catch (error) {
      failedBefore = true; // the socket may be the dead one after all: a fresh one on the next try
      throw error;
    }
  };
  // Tries until one succeeds or the deadline passes, backing off in between.
  const attempts = new Poll<boolean, Error>({
    auto: false,
    factory: attempt,
    frequency: { interval: 250, backoff: 2, max: Math.max(options.probeTimeout, 250) },
    name: 'jupyter-gkews:reattach'
  });
  return new Promise<boolean>((resolve, reject) => {
    attempts.ticked.connect((_, state) => {
      if (state.phase === 'resolved' || state.phase === 'reconnected') {
        attempts.dispose();
        resolve(!!state.payload);
      } else if (state.phase === 'rejected' && left() <= 0) {
        attempts.dispose();
        reject(state.payload);
      }
    });
    void attempts.start();
  });
}
