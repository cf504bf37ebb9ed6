/**
 * The reconnection of one notebook after a resume, with a fake panel and
 * kernel connection: a socket that may be bound to the released process is
 * replaced, the kernel must answer over it, and a kernel that never answers
 * is given up on within the deadline (the page then says so).
 */
import { Signal } from '@lumino/signaling';

import { holdKernelStart, reattachPanel, rememberSession } from '../reattach';
import { INotebookStatus } from '../types';

const nb: INotebookStatus = { path: 'work/train.ipynb', session_id: 's1', kernel_id: 'k1', status: 'resumed' };

/** A notebook panel on kernel k1 whose kernel answers kernel_info (or never does). */
function fakePanel(answers: boolean) {
  const owner = {};
  const connectionStatusChanged = new Signal<any, string>(owner);
  const kernel = {
    id: 'k1',
    isDisposed: false,
    status: 'idle',
    connectionStatus: 'connected',
    reconnect: jest.fn(async () => {
      connectionStatusChanged.emit('connected');
    }),
    requestKernelInfo: jest.fn(() => (answers ? Promise.resolve({}) : new Promise(() => undefined))),
    // an empty silent execute: the kernel's status messages for it are tracked (idle after it)
    requestExecute: jest.fn(() => ({
      done: Promise.resolve({}).then(() => {
        kernel.status = 'idle';
      })
    }))
  };
  const sessionContext = {
    ready: Promise.resolve(),
    session: { id: 's1', kernel, isDisposed: false, dispose: jest.fn() } as any,
    kernelPreference: {},
    sessionChanged: new Signal(owner),
    kernelChanged: new Signal(owner),
    connectionStatusChanged,
    changeKernel: jest.fn()
  };
  const panel: any = { sessionContext, context: { path: nb.path } };
  rememberSession(panel);
  return { panel, kernel, connectionStatusChanged };
}

const sessions: any = { refreshRunning: async () => undefined };
/** The server still runs the notebook's kernel. */
const kernelRuns = async () => true;

describe('reattachPanel', () => {
  it('replaces a socket that opened before the cycle was seen, then proves it with kernel_info', async () => {
    const { panel, kernel, connectionStatusChanged } = fakePanel(true);
    connectionStatusChanged.emit('connected'); // opened before the pause: maybe bound to the released process
    const staleBefore = performance.now() + 1;
    const ok = await reattachPanel(panel, nb, sessions, {
      probeTimeout: 1000,
      deadline: 5000,
      staleBefore,
      swap: true,
      kernelRuns
    });
    expect(ok).toBe(true);
    expect(kernel.reconnect).toHaveBeenCalledTimes(1);
    expect(kernel.requestKernelInfo).toHaveBeenCalled();
  });

  it('a socket that says "Unknown" after kernel_info runs an empty silent execute, so that it says Idle', async () => {
    const { panel, kernel } = fakePanel(true);
    kernel.status = 'unknown'; // a reconnected socket: kernel_info's status messages are not tracked
    await reattachPanel(panel, nb, sessions, {
      probeTimeout: 1000,
      deadline: 5000,
      staleBefore: -Infinity,
      swap: true,
      kernelRuns
    });
    expect(kernel.requestExecute).toHaveBeenCalledWith({ code: '', silent: true, store_history: false });
    expect(kernel.status).toBe('idle');
    const { panel: known, kernel: idle } = fakePanel(true);
    await reattachPanel(known, nb, sessions, {
      probeTimeout: 1000,
      deadline: 5000,
      staleBefore: -Infinity,
      swap: true,
      kernelRuns
    });
    expect(idle.requestExecute).not.toHaveBeenCalled();
  });

  it('keeps a socket that opened after the cycle was seen: the round trip alone proves it', async () => {
    const { panel, kernel, connectionStatusChanged } = fakePanel(true);
    const staleBefore = performance.now() - 1;
    connectionStatusChanged.emit('connected');
    await reattachPanel(panel, nb, sessions, {
      probeTimeout: 1000,
      deadline: 5000,
      staleBefore,
      swap: true,
      kernelRuns
    });
    expect(kernel.reconnect).not.toHaveBeenCalled();
  });

  it('gives up on a kernel that never answers within the deadline, after fresh sockets', async () => {
    const { panel, kernel } = fakePanel(false);
    const started = performance.now();
    await expect(
      reattachPanel(panel, nb, sessions, {
        probeTimeout: 100,
        deadline: 800,
        staleBefore: -Infinity,
        swap: true,
        kernelRuns
      })
    ).rejects.toThrow('its kernel did not answer');
    expect(performance.now() - started).toBeLessThan(3000);
    expect(kernel.reconnect.mock.calls.length).toBeGreaterThanOrEqual(2);
  });

  it('leaves alone a panel whose kernel was shut down since the resume, without waiting for it to load', async () => {
    const { panel } = fakePanel(true);
    panel.sessionContext.session = null;
    panel.sessionContext.ready = new Promise(() => undefined); // the kernel dialog JupyterLab shows waits for the user
    const started = performance.now();
    const ok = await reattachPanel(panel, nb, sessions, {
      probeTimeout: 1000,
      deadline: 60000,
      staleBefore: -Infinity,
      swap: true,
      kernelRuns: async (id: string) => id !== 'k1'
    });
    expect(ok).toBe(false);
    expect(performance.now() - started).toBeLessThan(5000);
    expect(panel.sessionContext.changeKernel).not.toHaveBeenCalled();
  });

  it('leaves alone a panel on another kernel when this page did not see the pause', async () => {
    const { panel } = fakePanel(true);
    panel.sessionContext.session.kernel.id = 'k-chosen-by-the-user';
    const ok = await reattachPanel(panel, nb, sessions, {
      probeTimeout: 100,
      deadline: 800,
      staleBefore: 0,
      swap: false,
      kernelRuns
    });
    expect(ok).toBe(false);
    expect(panel.sessionContext.changeKernel).not.toHaveBeenCalled();
  });
});

describe('holdKernelStart', () => {
  const status = (state: string, nbStatus: string): any => ({
    state,
    notebooks: [{ ...nb, status: nbStatus }]
  });

  it('holds a panel open all along once its notebook is released, and gives its preference back after', () => {
    const { panel } = fakePanel(true);
    panel.sessionContext.kernelPreference = { name: 'python3', shouldStart: true };
    holdKernelStart(panel, status('active', 'active'));
    expect(panel.sessionContext.kernelPreference.shouldStart).toBe(true);
    holdKernelStart(panel, status('pausing', 'checkpointed'));
    expect(panel.sessionContext.kernelPreference.shouldStart).toBe(true);
    holdKernelStart(panel, status('paused', 'released'));
    expect(panel.sessionContext.kernelPreference).toEqual({
      name: 'python3',
      shouldStart: false,
      autoStartDefault: false
    });
    holdKernelStart(panel, status('paused', 'released')); // again: still its own preference remembered
    panel.sessionContext.session = null;
    holdKernelStart(panel, status('active', 'resumed')); // not reconnected yet: a run must not start one
    expect(panel.sessionContext.kernelPreference.shouldStart).toBe(false);
    panel.sessionContext.session = { id: 's1', kernel: { id: 'k1' } };
    holdKernelStart(panel, status('active', 'resumed'));
    expect(panel.sessionContext.kernelPreference).toEqual({ name: 'python3', shouldStart: true });
  });
});
