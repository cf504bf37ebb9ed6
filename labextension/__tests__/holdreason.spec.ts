/**
 * When a cell run in a notebook would be lost (its kernel is released or
 * coming back), and when it can run: what heldcells.ts decides from the
 * server's status and this page's reconnection.
 */
import { holdReason, kernelLivedOn } from '../holdreason';
import { GkewsModel } from '../model';
import { IGkewsApi, INotebookStatus, IStatus } from '../types';
import { status as anyStatus } from './status';

/** The statuses of these tests: after a first pause (cycle 1). */
const status = (overrides: Partial<IStatus>) => anyStatus({ cycle: 1, ...overrides });

const paused: INotebookStatus = { path: 'work/train.ipynb', kernel_id: 'k1', status: 'released' };

async function modelWith(answer: IStatus): Promise<GkewsModel> {
  const api = { status: async () => answer } as unknown as IGkewsApi;
  const model = new GkewsModel(api);
  model.expectAttachment();
  await model.refresh();
  return model;
}

const panel = (path: string) => ({ context: { path } }) as any;

describe('holdReason', () => {
  it('holds a cell of a paused or resuming notebook, not of another one', async () => {
    let model = await modelWith(status({ state: 'paused', notebooks: [paused] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is paused');
    expect(holdReason(model, panel('other.ipynb'))).toBeNull();
    model = await modelWith(status({ state: 'resuming', notebooks: [paused] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is being resumed');
  });

  it('holds a cell of a notebook whose resume failed only while the page reconnects it', async () => {
    // not until a resume: one whose every resume fails would never run a cell again
    const failed = { ...paused, status: 'failed', verdict: 'failed' as const, checkpoint: '20261204-040000-000-abcd' };
    const model = await modelWith(status({ state: 'active', notebooks: [failed] }));
    model.setAttachment({ cycle: 1, waiting: ['work/train.ipynb'], failed: {} });
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is being reconnected to its restored kernel');
    model.setAttachment({ cycle: 1, waiting: [], failed: {} });
    expect(holdReason(model, panel('work/train.ipynb'))).toBeNull();
  });

  it('holds it while this page reconnects the resumed notebook, and lets it run once that is done', async () => {
    const resumed = { ...paused, status: 'resumed', verdict: 'restored-from-checkpoint' as const };
    const model = await modelWith(status({ state: 'active', notebooks: [resumed] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is being reconnected to its restored kernel');
    model.setAttachment({ cycle: 1, waiting: ['work/train.ipynb'], failed: {} });
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is being reconnected to its restored kernel');
    model.setAttachment({ cycle: 1, waiting: [], failed: {} });
    expect(holdReason(model, panel('work/train.ipynb'))).toBeNull();
  });

  it('holds a cell while the notebook is being paused, not one the pause left running', async () => {
    const checkpointed = { ...paused, status: 'checkpointed' };
    let model = await modelWith(status({ state: 'pausing', notebooks: [checkpointed] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is being paused');
    model = await modelWith(status({ state: 'pausing', notebooks: [{ ...paused, status: 'running' }] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBe('is being paused');
    for (const left of ['busy', 'not-checkpointed']) {
      model = await modelWith(
        status({ state: 'paused', notebooks: [checkpointed, { ...paused, path: 'b.ipynb', status: left }] })
      );
      expect(holdReason(model, panel('work/train.ipynb'))).toBe('is paused');
      expect(holdReason(model, panel('b.ipynb'))).toBeNull();
    }
  });

  it('never holds a cell of a notebook the pause lost: no resume brings its kernel back', async () => {
    const lost: INotebookStatus = { ...paused, status: 'lost', error: 'the server stopped before ...' };
    const model = await modelWith(status({ state: 'paused', notebooks: [lost] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBeNull(); // "is paused: the cell will run after Resume"
    model.dispose();
  });

  it('never holds a cell while nothing was paused', async () => {
    const running = { ...paused, status: 'running' };
    const model = await modelWith(status({ state: 'active', cycle: 0, notebooks: [running] }));
    expect(holdReason(model, panel('work/train.ipynb'))).toBeNull();
  });
});

describe('kernelLivedOn', () => {
  it('says a held cell reached a kernel that runs it itself: the same process, or a pause that failed', () => {
    const resumed = { ...paused, status: 'resumed' };
    expect(kernelLivedOn({ ...resumed, verdict: 'live-verified', same_process: true }, false)).toBe(true);
    expect(kernelLivedOn({ ...resumed, verdict: 'restored-from-checkpoint', same_process: true }, false)).toBe(true);
    expect(kernelLivedOn({ ...resumed, verdict: 'restored-from-checkpoint', same_process: false }, false)).toBe(false);
    expect(kernelLivedOn({ ...paused, status: 'checkpointed' }, true)).toBe(true); // the pause failed
    expect(kernelLivedOn({ ...paused, status: 'released' }, true)).toBe(false); // the resume failed
    expect(kernelLivedOn({ ...paused, status: 'failed', verdict: 'failed' }, true)).toBe(false);
    expect(kernelLivedOn(undefined, false)).toBe(false);
  });
});
