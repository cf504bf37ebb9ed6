/**
 * The frontend model against a fake server: what the status item and the
 * notifications would say as the server's status changes.
 */
import {
  checkpointLine,
  clip,
  display,
  doneElsewhere,
  names,
  nextStep,
  pausedNothingMore,
  resumesFrom,
  statusLabel,
  summarySentence,
  timelineRows,
  transitionMessage,
  verdictText
} from '../describe';
import { GkewsModel, ITransition } from '../model';
import { GkewsError, IGkewsApi, INotebookStatus, IStatus } from '../types';
import { status } from './status';

const restoredNotebook: INotebookStatus = {
  path: 'work/train.ipynb',
  kernel_id: 'k1',
  status: 'resumed',
  verdict: 'restored-from-checkpoint',
  restored: ['model', 'opt', 'x', 'y'],
  failed: {},
  skipped_at_save: {
    gen: { reason: "TypeError: cannot pickle 'generator' object", cell: 7 }
  }
};

/** A server whose answers the test sets; an Error answer means "unreachable". */
class FakeServer implements IGkewsApi {
  answer: IStatus | Error = status();
  posted: string[] = [];
  async status(): Promise<IStatus> {
    if (this.answer instanceof Error) {
      throw this.answer;
    }
    return this.answer;
  }
  async pause(): Promise<IStatus> {
    this.posted.push('pause');
    this.answer = status({ state: 'pausing', phase: 'checkpointing', cycle: 1 });
    return this.answer;
  }
  async resume(): Promise<IStatus> {
    this.posted.push('resume');
    throw new GkewsError('cannot resume while the session is active', 409, status());
  }
  checkpoints = jest.fn();
  deleteCheckpoint = jest.fn();
  checkpointNow = jest.fn();
  restore = jest.fn();
  auto = jest.fn();
  rewind = jest.fn();
}

describe('GkewsModel', () => {
  let server: FakeServer;
  let model: GkewsModel;
  let seen: ITransition[];

  beforeEach(() => {
    // a fresh tab (no status read before), with the tab's sessionStorage the page has in a browser
    const items = new Map<string, string>();
    (globalThis as any).window = {
      sessionStorage: {
        getItem: (k: string) => items.get(k) ?? null,
        setItem: (k: string, v: string) => items.set(k, v)
      }
    };
    server = new FakeServer();
    model = new GkewsModel(server);
    seen = [];
    model.transition.connect((_, t) => seen.push(t));
  });

  afterEach(() => {
    model.dispose();
    delete (globalThis as any).window;
  });

  it('says offline until the server answers, then active with a Pause action', async () => {
    expect(model.display).toBe('offline');
    expect(model.nextAction).toBeNull();
    await model.refresh();
    expect(model.display).toBe('active');
    expect(model.nextAction).toBe('pause');
    expect(seen).toEqual([]); // the first read announces nothing
  });

  it('offers Resume for the notebooks a resume left behind, while the others stay active', async () => {
    server.answer = status({
      state: 'active',
      cycle: 1,
      notebooks: [
        restoredNotebook,
        { path: 'b.ipynb', kernel_id: 'k2', status: 'released', checkpoint: 'c2' },
        { path: 'c.ipynb', kernel_id: 'k3', status: 'failed', verdict: 'failed', checkpoint: 'c3' },
        { path: 'd.ipynb', kernel_id: 'k4', status: 'failed' } // no checkpoint: nothing to bring back
      ]
    });
    await model.refresh();
    expect(model.nextAction).toBe('pause');
    expect(model.stillToResume).toEqual(['b.ipynb', 'c.ipynb']);
    server.answer = status({ state: 'active', cycle: 1, notebooks: [restoredNotebook] });
    await model.refresh();
    expect(model.stillToResume).toEqual([]);
  });

  it('offers Pause for the notebooks a pause left running, while the others stay paused', async () => {
    server.answer = status({
      state: 'paused',
      cycle: 1,
      notebooks: [
        { path: 'a.ipynb', kernel_id: 'k1', status: 'released', checkpoint: 'c1' },
        { path: 'b.ipynb', kernel_id: 'k2', status: 'busy', error: 'still running a cell' }
      ]
    });
    await model.refresh();
    expect(model.nextAction).toBe('resume');
    expect(model.leftRunning).toEqual(['b.ipynb']);
    expect(model.stillToResume).toEqual([]); // that is for an active session
  });

  it("pauses alone a notebook whose own kernel runs while the others are paused, from that notebook's toolbar", async () => {
    const released: INotebookStatus = { path: 'a.ipynb', kernel_id: 'k1', status: 'released', checkpoint: 'c1' };
    const suspended: INotebookStatus = { path: 's.ipynb', kernel_id: 'k3', status: 'suspended', checkpoint: 'c3' };
    const busy: INotebookStatus = { path: 'b.ipynb', kernel_id: 'k2', status: 'busy' };
    server.answer = status({ state: 'paused', cycle: 1, notebooks: [released, suspended, busy] });
    await model.refresh();
    expect(model.pausesAlone(undefined, true)).toBe(true); // opened since the pause
    expect(model.pausesAlone(busy, true)).toBe(true); // left running by it
    expect(model.pausesAlone(undefined, false)).toBe(false); // no kernel: nothing to pause
    expect(model.pausesAlone(released, false)).toBe(false); // Resume brings it back
    expect(model.pausesAlone(suspended, true)).toBe(false); // its process lives on, paused
    server.answer = status({ state: 'active', cycle: 1 });
    await model.refresh();
    expect(model.pausesAlone(undefined, true)).toBe(false); // the session's own Pause takes it
  });

  it('disables the action while a pause runs and announces the pause when it is done', async () => {
    await model.refresh();
    const changes = jest.fn();
    model.changed.connect(changes);
    await model.pause();
    expect(server.posted).toEqual(['pause']);
    expect(model.display).toBe('pausing');
    // no second pause; a resume pressed now is queued until the pause is done
    expect(model.nextAction).toBe('queue-resume');
    expect(changes).toHaveBeenCalled();

    server.answer = status({
      state: 'paused',
      cycle: 1,
      message: 'paused 1 notebook(s)',
      notebooks: [{ path: 'work/train.ipynb', kernel_id: 'k1', status: 'released' }]
    });
    await model.refresh();
    expect(model.display).toBe('paused');
    expect(model.nextAction).toBe('resume');
    expect(seen.map(t => t.kind)).toEqual(['paused']);
    expect(transitionMessage('paused', model.status!)).toBe('Paused train.ipynb; Resume brings its kernel back.');
  });

  it('says when the idle policy paused, and after how long unused', () => {
    const released = [{ path: 'work/train.ipynb', kernel_id: 'k1', status: 'released' }];
    const byPolicy = status({
      state: 'paused',
      paused_by: 'idle policy',
      timeline: { last_activity: 1000, pause_requested: 1000 + 45 * 60 },
      notebooks: released
    });
    expect(transitionMessage('paused', byPolicy)).toBe(
      'Unused for 45 min, the idle policy paused train.ipynb; Resume brings its kernel back.'
    );
    byPolicy.timeline = { last_activity: 0, pause_requested: 5 * 3600 };
    expect(transitionMessage('paused', byPolicy)).toMatch(/^Unused for 5 h, the idle policy paused train.ipynb;/);
    expect(transitionMessage('paused', { ...byPolicy, paused_by: 'user' })).toMatch(/^Paused train.ipynb;/);
  });

  it('says a pause from paused that paused nothing paused nothing', () => {
    const s = status({
      state: 'paused',
      message:
        'nothing more was paused: second.ipynb: its kernel was still running a cell after 8 s; still paused: first.ipynb',
      notebooks: [
        { path: 'first.ipynb', kernel_id: 'k1', status: 'released' },
        {
          path: 'second.ipynb',
          kernel_id: 'k2',
          status: 'busy',
          error: 'its kernel was still running a cell after 8 s'
        }
      ]
    });
    expect(pausedNothingMore(s)).toBe(true);
    expect(transitionMessage('paused', s)).toBe(
      'Nothing more was paused. second.ipynb is still running: its kernel was still running a cell after 8 s. ' +
        'Still paused: first.ipynb.'
    );
    expect(pausedNothingMore({ ...s, message: 'paused 1 notebook(s)' })).toBe(false);
  });

  it('knows which checkpoints a resume needs (the server refuses to delete them)', () => {
    const paused = status({
      state: 'paused',
      notebooks: [
        { path: 'a.ipynb', kernel_id: 'k1', status: 'released', checkpoint: 'c-a' },
        { path: 'b.ipynb', kernel_id: 'k2', status: 'busy' }
      ]
    });
    expect(resumesFrom('c-a', paused)).toBe('a.ipynb');
    expect(resumesFrom('c-other', paused)).toBeNull();
    const resumed = status({
      state: 'active',
      notebooks: [
        { path: 'a.ipynb', kernel_id: 'k1', status: 'resumed', checkpoint: 'c-a' },
        { path: 'b.ipynb', kernel_id: 'k2', status: 'failed', checkpoint: 'c-b', unrestored_checkpoints: ['c-old'] }
      ]
    });
    expect(resumesFrom('c-a', resumed)).toBeNull(); // resumed: free to delete
    expect(resumesFrom('c-b', resumed)).toBe('b.ipynb'); // left behind by the resume
    expect(resumesFrom('c-old', resumed)).toBe('b.ipynb'); // holds what the resume could not restore
    expect(resumesFrom('c-a', null)).toBeNull();
  });

  it('notices a pause that finished between two reads', async () => {
    await model.refresh();
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    expect(seen.map(t => t.kind)).toEqual(['paused']);
  });

  it('goes through waiting for capacity and restoring to ready, with the verdict', async () => {
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    server.answer = status({ state: 'resuming', phase: 'waiting-for-capacity', cycle: 1 });
    await model.refresh();
    expect(model.display).toBe('waiting for capacity');
    server.answer = status({ state: 'resuming', phase: 'verifying', cycle: 1 });
    await model.refresh();
    expect(model.display).toBe('restoring');
    server.answer = status({ state: 'active', cycle: 1, notebooks: [restoredNotebook] });
    await model.refresh();
    expect(model.display).toBe('ready');
    expect(seen.map(t => t.kind)).toEqual(['resumed']);
    expect(transitionMessage('resumed', seen[0].status)).toBe(
      'Resumed train.ipynb from its checkpoint: 4 variables restored; gen (a generator, re-run cell 7) was not saved.'
    );
  });

  it('a page reloaded while the resume ended announces its verdict, once, as the page before the reload would', async () => {
    server.answer = status({ state: 'resuming', phase: 'verifying', cycle: 1 });
    await model.refresh();
    model.dispose(); // the reload: this tab's next page reads the status anew
    server.answer = status({ state: 'active', cycle: 1, notebooks: [restoredNotebook] });
    const reloaded = new GkewsModel(server);
    const announced: string[] = [];
    reloaded.transition.connect((_, t) => announced.push(t.kind));
    await reloaded.refresh();
    expect(announced).toEqual(['resumed']);
    reloaded.dispose();
    const again = new GkewsModel(server); // reloaded once more: nothing new to announce
    again.transition.connect((_, t) => announced.push(t.kind));
    await again.refresh();
    expect(announced).toEqual(['resumed']);
    again.dispose();
  });

  it('says what a partial restore left behind, and how to get it back', () => {
    const partial: INotebookStatus = {
      ...restoredNotebook,
      verdict: 'partially-restored',
      restored: ['model', 'opt'],
      failed: { t: 'blob 1a2b does not match its hash' },
      next_step: 're-run the cells that define t, or restore them from an earlier checkpoint'
    };
    expect(verdictText(partial)).toContain('restored from checkpoint: 2 variables; 1 failed: t');
    const s = status({ state: 'active', cycle: 1, notebooks: [partial] });
    expect(transitionMessage('resumed', s)).toContain('t could not be restored');
    expect(nextStep(s)).toBe(
      'work/train.ipynb: re-run the cells that define t, or restore them from an earlier checkpoint'
    );
  });

  it('names two notebooks of one file name by their paths, in every sentence that names both', () => {
    const x: INotebookStatus = { ...restoredNotebook, path: 'dup/x/train.ipynb', kernel_id: 'kx' };
    const y: INotebookStatus = {
      path: 'dup/y/train.ipynb',
      kernel_id: 'ky',
      status: 'lost',
      verdict: null,
      deleted: true,
      checkpoint: '20261203-061500-ab12'
    };
    const other: INotebookStatus = { ...restoredNotebook, path: 'held/other.ipynb', kernel_id: 'ko' };
    const after = status({ state: 'active', cycle: 1, notebooks: [x, y, other] });
    expect(transitionMessage('resumed', after)).toMatch(
      /^Resumed dup\/x\/train\.ipynb from its checkpoint.* dup\/y\/train\.ipynb was deleted.* Resumed other\.ipynb /
    );
    const paused = status({
      state: 'paused',
      cycle: 1,
      notebooks: [x, y, other].map(nb => ({ ...nb, status: 'released', deleted: false, verdict: null }))
    });
    expect(transitionMessage('paused', paused)).toBe(
      'Paused dup/x/train.ipynb, dup/y/train.ipynb and other.ipynb; Resume brings their kernels back.'
    );
    expect(names(['a/t.ipynb', 'b/t.ipynb'])).toBe('a/t.ipynb and b/t.ipynb');
    expect(names(['a/t.ipynb', 'b/u.ipynb'])).toBe('t.ipynb and u.ipynb');
  });

  it('names a notebook deleted while paused after the resume, and where its checkpoint is', async () => {
    const deleted: INotebookStatus = {
      path: 'work/gone.ipynb',
      kernel_id: 'k2',
      status: 'lost',
      verdict: null,
      deleted: true,
      checkpoint: '20261203-061500-ab12',
      error: 'the notebook file work/gone.ipynb was deleted while paused, so no kernel was started for it',
      next_step: 'its checkpoint 20261203-061500-ab12 stays in the store: in another notebook run ...'
    };
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    // the only notebook paused was deleted: still a finished resume, and the page says so
    server.answer = status({ state: 'active', cycle: 1, notebooks: [deleted] });
    await model.refresh();
    expect(seen.map(t => t.kind)).toEqual(['resumed']);
    expect(transitionMessage('resumed', seen[0].status)).toBe(
      'gone.ipynb was deleted while paused: not resumed; its checkpoint 20261203-061500-ab12 stays in the store.'
    );
    const both = status({ state: 'active', cycle: 1, notebooks: [restoredNotebook, deleted] });
    expect(transitionMessage('resumed', both)).toMatch(
      /^Resumed train\.ipynb from its checkpoint.* gone\.ipynb was deleted/
    );
    expect(verdictText(deleted)).toBe('deleted while paused: not resumed');
    // while still paused: not "gone.ipynb is still running"
    const paused = status({
      state: 'paused',
      cycle: 1,
      notebooks: [{ ...restoredNotebook, status: 'released', verdict: null }, deleted]
    });
    expect(summarySentence(paused)).toBe(
      'Paused train.ipynb; Resume brings its kernel back. gone.ipynb was deleted while paused: Resume does not ' +
        'bring it back; its checkpoint 20261203-061500-ab12 stays in the store.'
    );
    const unsaved = {
      ...deleted,
      deleted: undefined,
      error: "the server stopped before this notebook's checkpoint was written"
    };
    expect(summarySentence(status({ state: 'paused', cycle: 1, notebooks: [unsaved] }))).toBe(
      "Paused; no notebook had a kernel to release. gone.ipynb was not paused: the server stopped before this notebook's checkpoint was written."
    );
    expect(nextStep(both)).toBe(`work/gone.ipynb: ${deleted.next_step}`);
  });

  it('says live model verified when the same process came back', () => {
    expect(verdictText({ ...restoredNotebook, verdict: 'live-verified' })).toBe('live model verified');
  });

  it('shows progress in the status label', () => {
    const s = status({
      state: 'pausing',
      phase: 'checkpointing',
      progress: {
        notebooks_done: 0,
        notebooks_total: 2,
        variables_done: 3,
        variables_total: 14,
        bytes_done: 12_500_000
      }
    });
    expect(statusLabel(s, true)).toBe('GPU session: pausing (checkpointing, notebook 1/2, 3/14 variables, 13 MB)');
  });

  it('says which notebooks a pause left running, since their GPUs were not released', () => {
    const nb = (path: string, st: string): INotebookStatus => ({ path, kernel_id: path, status: st });
    const s = status({
      state: 'paused',
      cycle: 1,
      notebooks: [nb('a.ipynb', 'released'), nb('work/train.ipynb', 'busy'), nb('c.ipynb', 'not-checkpointed')]
    });
    expect(statusLabel(s, true)).toBe('GPU session: paused; train.ipynb and c.ipynb still running');
    expect(statusLabel(status({ state: 'paused', cycle: 1, notebooks: [nb('a.ipynb', 'released')] }), true)).toBe(
      'GPU session: paused'
    );
  });

  it('announces a failure with its next step', async () => {
    await model.refresh();
    server.answer = status({
      state: 'failed',
      cycle: 1,
      error: { reason: 'The pause stopped at releasing.', next_step: 'Pause again.' }
    });
    await model.refresh();
    expect(seen.map(t => t.kind)).toEqual(['failed']);
    expect(transitionMessage('failed', seen[0].status)).toBe('The pause stopped at releasing. Pause again.');
    expect(model.nextAction).toBe('pause');
  });

  it('names notebooks by file in a failure notification, the general next step after the reason', () => {
    const path = 'projects/2026/experiments/long-folder-name/fixbusy.ipynb';
    const failed = status({
      state: 'failed',
      cycle: 1,
      notebooks: [{ path, kernel_id: path, status: 'running' } as INotebookStatus],
      error: {
        reason:
          `No notebook could be checkpointed, so nothing was released: ${path}: its kernel was still running a ` +
          'cell after 8 s; let it finish and pause again, or pause with interrupt to stop the cell.',
        next_step: 'Fix the cause above and pause again; every kernel is still running.'
      }
    });
    const text = transitionMessage('failed', failed);
    // the toast shows the first 140 characters (the reason, by file name) and offers the whole
    expect(clip(text)).toContain(
      'released: fixbusy.ipynb: its kernel was still running a cell after 8 s; let it finish'
    );
    expect(text).toContain('pause with interrupt to stop the cell. Fix the cause above and pause again');
    expect(text).not.toContain('projects/2026');
  });

  it('keeps the server message of a refused action and the status it sent', async () => {
    await model.refresh();
    await expect(model.resume()).rejects.toThrow('cannot resume while the session is active');
    expect(model.display).toBe('active');
    expect(model.busy).toBe(false);
  });

  it('goes offline when the server stops answering and announces the reconnect', async () => {
    await model.refresh();
    server.answer = new GkewsError('the Jupyter server cannot be reached', 0);
    await model.refresh();
    expect(model.display).toBe('offline');
    expect(model.lastError).toContain('cannot be reached');
    expect(statusLabel(model.status, model.connected)).toBe('GPU session: server unreachable');
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    expect(model.connected).toBe(true);
    // the server came back paused: that is the news, not the reconnect itself
    expect(seen.map(t => t.kind)).toEqual(['paused']);
    server.answer = new Error('gone again');
    await model.refresh();
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    expect(seen.map(t => t.kind)).toEqual(['paused', 'reconnected']);
  });

  it('keeps polling on its own (a lumino Poll) and backs off while the server is away', async () => {
    jest.useFakeTimers();
    try {
      const fast = new GkewsModel(server, { idleInterval: 1000, retryInterval: 1000, maxBackoff: 4000 });
      const reads = jest.spyOn(server, 'status');
      fast.start();
      await jest.advanceTimersByTimeAsync(0);
      expect(reads).toHaveBeenCalledTimes(1);
      await jest.advanceTimersByTimeAsync(1000);
      expect(reads).toHaveBeenCalledTimes(2);
      server.answer = new Error('down');
      await jest.advanceTimersByTimeAsync(1000); // read 3 fails
      expect(fast.connected).toBe(false);
      // while the server is away the waits grow (1 s, then up to 2 s, 4 s, capped at 4 s)
      const timesOfReads: number[] = [];
      reads.mockClear();
      for (let t = 0; t < 20_000; t += 100) {
        await jest.advanceTimersByTimeAsync(100);
        while (timesOfReads.length < reads.mock.calls.length) {
          timesOfReads.push(t);
        }
      }
      const gaps = timesOfReads.slice(1).map((t, i) => t - timesOfReads[i]);
      expect(gaps.length).toBeGreaterThanOrEqual(4);
      expect(Math.max(...gaps)).toBeLessThanOrEqual(4100);
      expect(gaps.slice(-3).every(g => g >= 1000)).toBe(true);
      expect(reads.mock.calls.length).toBeLessThan(20); // not every second: it backed off
      server.answer = status();
      await jest.advanceTimersByTimeAsync(4100);
      expect(fast.connected).toBe(true);
      fast.dispose();
    } finally {
      jest.useRealTimers();
    }
  });

  it('reads faster while a transition runs, with the intervals the settings give', async () => {
    jest.useFakeTimers();
    try {
      const m = new GkewsModel(server);
      m.configure({ idleInterval: 5000, busyInterval: 250 });
      const reads = jest.spyOn(server, 'status');
      m.start();
      await jest.advanceTimersByTimeAsync(0);
      await jest.advanceTimersByTimeAsync(4900);
      expect(reads).toHaveBeenCalledTimes(1);
      await jest.advanceTimersByTimeAsync(100);
      expect(reads).toHaveBeenCalledTimes(2);
      server.answer = status({ state: 'pausing', phase: 'checkpointing', cycle: 1 });
      await jest.advanceTimersByTimeAsync(5000);
      reads.mockClear();
      await jest.advanceTimersByTimeAsync(1000);
      expect(reads).toHaveBeenCalledTimes(4);
      m.dispose();
    } finally {
      jest.useRealTimers();
    }
  });

  it('queues a resume pressed while the pause finishes, and posts it once paused', async () => {
    const resumed: string[] = [];
    server.resume = async () => {
      resumed.push('resume');
      return status({ state: 'resuming', phase: 'waiting-for-capacity', cycle: 1 });
    };
    server.answer = status({ state: 'pausing', phase: 'releasing', cycle: 1 });
    await model.refresh();
    expect(await model.resume()).toBeNull();
    expect(model.resumeQueued).toBe(true);
    expect(model.nextAction).toBeNull();
    expect(model.label).toBe('GPU session: pausing (releasing); resume queued');
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(resumed).toEqual(['resume']);
    expect(model.resumeQueued).toBe(false);
    expect(model.display).toBe('waiting for capacity');
  });

  it('drops a queued resume when the pause fails, and says why', async () => {
    const why: string[] = [];
    model.queuedResumeFailed.connect((_, w) => why.push(w));
    server.answer = status({ state: 'pausing', phase: 'checkpointing', cycle: 1 });
    await model.refresh();
    await model.resume();
    server.answer = status({
      state: 'failed',
      cycle: 1,
      error: { reason: 'No notebook could be checkpointed.', next_step: 'Pause again.' }
    });
    await model.refresh();
    expect(why).toEqual(['the pause failed, so there was nothing to resume']);
    expect(model.resumeQueued).toBe(false);
  });

  it('says ready only once this page reconnected the notebooks of the resumed cycle', async () => {
    model.expectAttachment();
    server.answer = status({ state: 'resuming', phase: 'verifying', cycle: 2 });
    await model.refresh();
    server.answer = status({ state: 'active', cycle: 2, notebooks: [restoredNotebook] });
    await model.refresh();
    expect(model.display).toBe('reconnecting');
    expect(model.label).toBe('GPU session: reconnecting the notebooks');
    expect(model.nextAction).toBeNull(); // a second click of Resume would pause the session it resumed

    model.setAttachment({ cycle: 2, waiting: ['work/train.ipynb', 'eval.ipynb'], failed: {} });
    expect(model.label).toBe('GPU session: reconnecting train.ipynb and eval.ipynb');
    model.setAttachment({ cycle: 1, waiting: [], failed: {} }); // an older cycle does not count
    expect(model.display).toBe('reconnecting');
    model.setAttachment({
      cycle: 2,
      waiting: [],
      failed: { 'work/train.ipynb': 'its kernel did not answer within 5 s' }
    });
    expect(model.label).toBe('GPU session: train.ipynb not reconnected');
    model.setAttachment({ cycle: 2, waiting: [], failed: {} });
    expect(model.label).toBe('GPU session: ready');
    expect(model.nextAction).toBe('pause');
  });

  it('says a notebook the resume failed is not resumed, and its own button resumes it', async () => {
    // the kernel died while the resume restored into it: the server is active, the notebook still to resume
    model.expectAttachment();
    const died: INotebookStatus = {
      path: 'work/k1.ipynb',
      kernel_id: 'k1',
      status: 'failed',
      verdict: 'failed',
      checkpoint: '20261204-040000-000-abcd',
      error: 'the kernel of work/k1.ipynb died (its process is gone) during the call',
      next_step: 'resume again: its checkpoint 20261204-040000-000-abcd is kept'
    };
    const lost: INotebookStatus = { ...died, path: 'gone.ipynb', kernel_id: 'k3', status: 'lost' };
    server.answer = status({ state: 'active', cycle: 2, notebooks: [restoredNotebook, died, lost] });
    await model.refresh();
    model.setAttachment({ cycle: 2, waiting: [], failed: {} });
    expect(model.display).toBe('not resumed'); // it said "ready"
    expect(model.label).toBe('GPU session: k1.ipynb not resumed');
    expect(model.resumesAlone(died)).toBe(true);
    expect(model.resumesAlone(lost)).toBe(false); // its checkpoint is gone: nothing to resume
    expect(model.resumesAlone(restoredNotebook)).toBe(false);
    expect(model.nextAction).toBe('pause'); // the others' buttons still pause
  });
});

describe('sentences', () => {
  it('names the notebooks, with plurals', () => {
    expect(names(['a/x.ipynb'])).toBe('x.ipynb');
    expect(names(['x.ipynb', 'y.ipynb', 'z.ipynb'])).toBe('x.ipynb, y.ipynb and z.ipynb');
    const two = status({
      state: 'paused',
      cycle: 1,
      notebooks: [
        { path: 'a.ipynb', kernel_id: 'k1', status: 'released' },
        { path: 'b.ipynb', kernel_id: 'k2', status: 'released' },
        { path: 'c.ipynb', kernel_id: 'k3', status: 'busy', error: 'its kernel was still running a cell after 60 s' }
      ]
    });
    expect(transitionMessage('paused', two)).toBe(
      'Paused a.ipynb and b.ipynb; Resume brings their kernels back. ' +
        'c.ipynb is still running: its kernel was still running a cell after 60 s.'
    );
    expect(
      summarySentence(
        status({ state: 'pausing', phase: 'checkpointing', cycle: 1, notebooks: two.notebooks.slice(0, 1) })
      )
    ).toBe('Pausing a.ipynb: writing the checkpoints.');
    const live = status({ notebooks: [{ ...restoredNotebook, verdict: 'live-verified' }] });
    expect(transitionMessage('resumed', live)).toBe('Resumed train.ipynb; its live model was verified.');
    for (const text of [transitionMessage('paused', two), summarySentence(live)]) {
      expect(text).not.toMatch(/\(s\)/);
    }
  });

  it('says which kernels a local GPU suspend kept alive, and what a resume waits for', () => {
    const suspended = status({
      state: 'paused',
      cycle: 1,
      notebooks: [
        { path: 'gpu.ipynb', kernel_id: 'k1', status: 'suspended', message: 'suspended in host memory (4.0 GiB)' },
        { path: 'cpu.ipynb', kernel_id: 'k2', status: 'released', message: 'released (checkpoint on disk)' }
      ]
    });
    expect(summarySentence(suspended)).toBe(
      'Paused gpu.ipynb and cpu.ipynb; Resume brings their kernels back. ' +
        'gpu.ipynb: suspended in host memory (4.0 GiB).'
    );
    const waiting = status({
      state: 'resuming',
      phase: 'waiting-for-capacity',
      cycle: 1,
      notebooks: [
        {
          path: 'gpu.ipynb',
          kernel_id: 'k1',
          status: 'suspended',
          message: 'waiting for capacity: GPU 0 needs 4.0 GiB more; held by pid 42 (ana, 130.0 GiB)'
        }
      ]
    });
    expect(summarySentence(waiting)).toBe(
      'Resuming gpu.ipynb: waiting for capacity: GPU 0 needs 4.0 GiB more; held by pid 42 (ana, 130.0 GiB).'
    );
  });
});

describe('display and timeline', () => {
  it('orders the timeline and measures each step from its request', () => {
    const rows = timelineRows({
      last_activity: 90,
      pause_requested: 100,
      checkpoint_done: 101.5,
      environment_stopped: 102,
      resume_requested: 200,
      kernels_started: 203,
      restore_done: 204,
      kernel_usable: 210
    });
    expect(rows.map(r => [r.label, r.offset])).toEqual([
      ['last activity', null],
      ['pause requested', 0],
      ['checkpoints written', 1.5],
      ['kernels released', 2],
      ['resume requested', 0],
      ['kernels started', 3],
      ['restored and verified', 4],
      ['first cell ran (kernel usable)', 10]
    ]);
  });

  it('gives no delay to a step an earlier attempt of the resume timed', () => {
    const rows = timelineRows({ pause_requested: 100, resume_requested: 300, kernel_usable: 250, restore_done: 310 });
    expect(rows.map(r => [r.label, r.offset])).toEqual([
      ['pause requested', 0],
      ['resume requested', 0],
      ['restored and verified', 10],
      ['first cell ran (kernel usable)', null]
    ]);
  });

  it('is offline without a status', () => {
    expect(display(null, true)).toBe('offline');
  });
});

describe('a resume cut short', () => {
  it('says the resume did not finish when a server restart brings the session back paused', () => {
    const back = status({
      state: 'paused',
      cycle: 1,
      message: 'the server stopped during a resume; resume again to restore the notebooks from their checkpoints',
      notebooks: [{ path: 'work/train.ipynb', kernel_id: 'k1', status: 'released', checkpoint: 'c1' }]
    });
    expect(transitionMessage('paused', back)).toBe(
      'The resume did not finish: the server restarted during it. Paused train.ipynb; Resume brings its kernel back.'
    );
  });
});

describe('doneElsewhere', () => {
  it('says a Pause or Resume another tab did meanwhile is done, not failed; other refusals stay errors', () => {
    const refused = (now: IStatus) => new GkewsError('nothing to resume: no notebook is paused', 409, now);
    const resumed = status({ state: 'active', cycle: 1, notebooks: [restoredNotebook] });
    expect(doneElsewhere('resume', refused(resumed))).toBe('Already resumed (from another tab).');
    expect(doneElsewhere('resume', refused(status({ state: 'resuming', phase: 'restoring', cycle: 1 })))).toMatch(
      /^A resume is already under way/
    );
    expect(doneElsewhere('pause', refused(status({ state: 'paused', cycle: 1 })))).toMatch(/^Already paused/);
    expect(doneElsewhere('resume', refused(status({ state: 'active' })))).toBeNull(); // never paused: an error
    expect(doneElsewhere('resume', new GkewsError('boom', 500, resumed))).toBeNull();
    expect(doneElsewhere('pause', new Error('unreachable'))).toBeNull();
  });
});

describe('the sidebar row of a checkpoint', () => {
  const base = {
    id: '20261207-010203-004-abcd',
    created: '2026-12-07T01:02:03Z',
    notebook: 'train.ipynb',
    bytes: 2048,
    variables: 2,
    skipped: 0
  };

  it('says which variables a save of some of them holds, or left out', () => {
    expect(checkpointLine(base)).toMatch(/· 2\.0 KB · 2 variables · 0 skipped$/);
    expect(checkpointLine({ ...base, only: ['results', 'step'] })).toMatch(/· only results, step$/);
    expect(checkpointLine({ ...base, excluded: ['model'] })).toMatch(/· without model$/);
    expect(checkpointLine({ ...base, error: 'bad checksum' })).toBe(
      '20261207-010203-004-abcd: unreadable (bad checksum)'
    );
  });
});
