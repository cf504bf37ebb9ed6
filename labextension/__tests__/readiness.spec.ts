/**
 * Readiness: "ready" after a resume waits for this page's reconnection of the resumed notebooks, and
 * only for that.
 */
jest.mock('@jupyterlab/apputils', () => ({ Notification: { error: jest.fn() } })); // it needs a DOM
jest.mock('../dialog', () => ({ showDialog: jest.fn() })); // a JupyterLab Dialog, which needs a DOM too

import { GkewsModel } from '../model';
import { Readiness, resumedNotebooks } from '../readiness';
import { IGkewsApi, INotebookStatus, IStatus } from '../types';
import { status } from './status';

class Server implements IGkewsApi {
  answer: IStatus = status();
  async status(): Promise<IStatus> {
    return this.answer;
  }
  pause = jest.fn();
  resume = jest.fn();
  checkpoints = jest.fn();
  deleteCheckpoint = jest.fn();
  checkpointNow = jest.fn();
  restore = jest.fn();
  auto = jest.fn();
  rewind = jest.fn();
}

describe('Readiness', () => {
  it('says ready, with Pause offered, after a resume whose only notebook was deleted while paused', async () => {
    const server = new Server();
    const model = new GkewsModel(server);
    const sessions = { refreshRunning: jest.fn() } as any;
    new Readiness(model, () => [], sessions, Promise.resolve());
    server.answer = status({ state: 'paused', cycle: 1 });
    await model.refresh();
    const deleted: INotebookStatus = {
      path: 'only.ipynb',
      kernel_id: 'k1',
      status: 'lost',
      verdict: null,
      deleted: true,
      checkpoint: '20261205-230000-000-ab12'
    };
    server.answer = status({ state: 'active', cycle: 1, notebooks: [deleted] });
    await model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0)); // the reconnection's (empty) round
    // it said "reconnecting the notebooks" for ever, and Pause stayed disabled, after a reload too
    expect(model.display).toBe('ready');
    expect(model.nextAction).toBe('pause');
    model.dispose();
  });

  it('reconnects a notebook whose checkpoint the resume found gone: its kernel runs, without the saved state', () => {
    // its panel stayed on the released kernel's connection: cells [*] for ever, while the status said "ready"
    const gone: INotebookStatus = {
      path: 'd2.ipynb',
      kernel_id: 'k2',
      status: 'lost',
      verdict: 'failed',
      checkpoint: '20261205-230000-000-ab12',
      error: 'checkpoint 20261205-230000-000-ab12 does not exist'
    };
    const deleted: INotebookStatus = { ...gone, path: 'deleted.ipynb', verdict: null, deleted: true };
    const back: INotebookStatus = { ...gone, path: 'd1.ipynb', status: 'resumed', verdict: 'restored-from-checkpoint' };
    const resumed = resumedNotebooks(status({ state: 'active', cycle: 1, notebooks: [back, gone, deleted] }));
    expect(resumed.map(nb => nb.path)).toEqual(['d1.ipynb', 'd2.ipynb']);
  });
});
