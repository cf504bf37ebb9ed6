/**
 * reattach.ts gives a notebook the very session the server restored through
 * JupyterLab's private SessionContext._handleNewSession. This test runs
 * against the JupyterLab packages installed for the build (package.json pins
 * the range): it fails when the method disappears or stops doing what the
 * extension relies on (the context takes the session, says so, and is ready).
 */
import { Signal } from '@lumino/signaling';

declare const require: (id: string) => any; // jest's: loaded after the globals below are set

// The kernel dialogs (and the widget library they draw with) are not part of what is tested.
jest.mock('@jupyterlab/apputils/lib/dialog', () => ({ Dialog: {}, showDialog: jest.fn() }));
jest.mock('@lumino/widgets', () => ({ Widget: class {} }));

/** The browser globals JupyterLab's modules read when they load (no DOM is used by the test itself). */
function loadSessionContext(): typeof import('@jupyterlab/apputils/lib/sessioncontext').SessionContext {
  const g = globalThis as any;
  g.navigator ??= { userAgent: 'node', platform: 'node' };
  g.window ??= g;
  g.WebSocket ??= class {};
  g.document ??= {
    createElement: () => ({ style: {} }),
    getElementById: () => null,
    addEventListener: () => undefined
  };
  return require('@jupyterlab/apputils/lib/sessioncontext').SessionContext;
}

/** A session connection as far as SessionContext looks at it. */
function fakeSession(id: string): any {
  const owner = {};
  return {
    id,
    path: 'work/train.ipynb',
    name: 'train.ipynb',
    type: 'notebook',
    kernel: { id: 'k1', name: 'python3', status: 'idle' },
    isDisposed: false,
    dispose: jest.fn(),
    disposed: new Signal(owner),
    propertyChanged: new Signal(owner),
    kernelChanged: new Signal(owner),
    statusChanged: new Signal(owner),
    connectionStatusChanged: new Signal(owner),
    pendingInput: new Signal(owner),
    iopubMessage: new Signal(owner),
    unhandledMessage: new Signal(owner)
  };
}

describe("JupyterLab's SessionContext._handleNewSession", () => {
  it('still exists and attaches the given session connection', async () => {
    const sessionManager: any = { ready: Promise.resolve(), running: () => [][Symbol.iterator]() };
    const specsManager: any = { specs: null, ready: Promise.resolve() };
    const SessionContext = loadSessionContext();
    const sc = new SessionContext({
      sessionManager,
      specsManager,
      path: 'work/train.ipynb',
      type: 'notebook',
      name: 'train.ipynb'
    });
    const internals = sc as unknown as { _handleNewSession?: (s: unknown) => unknown };
    expect(typeof internals._handleNewSession).toBe('function');

    const changes: string[] = [];
    sc.sessionChanged.connect((_, change) => changes.push(change.newValue?.id ?? 'none'));
    const session = fakeSession('restored-session');
    const kernel = internals._handleNewSession!(session);
    expect(sc.session).toBe(session);
    expect(kernel).toBe(session.kernel);
    expect(changes).toEqual(['restored-session']);
    await expect(sc.ready).resolves.toBeUndefined();
  });
});
