/**
 * What the page says about a paused notebook's kernel: there is none running (the pause released it, or
 * its process is suspended), and its checkpoint stays, whatever JupyterLab's own dialogs say.
 */
import { pausedKernelNote, shutDownAllNote } from '../describe';
import { status } from './status';

const paused = status({
  state: 'paused',
  cycle: 1,
  notebooks: [{ path: 'work/train.ipynb', kernel_id: 'k1', status: 'released', checkpoint: 'c1' }]
});

describe('a paused notebook', () => {
  it("tells what JupyterLab's Shut Down All does to it: nothing runs, its checkpoint stays", () => {
    expect(shutDownAllNote(paused)).toBe(
      'train.ipynb is paused and has no running kernel: Shut Down All leaves it alone. ' +
        'Its checkpoint is kept; Resume brings it back from there.'
    );
    const suspended = status({
      state: 'paused',
      cycle: 1,
      notebooks: [
        { path: 'gpu.ipynb', kernel_id: 'k1', status: 'suspended', checkpoint: 'c1' },
        { path: 'a.ipynb', kernel_id: 'k2', status: 'released', checkpoint: 'c2' },
        { path: 'b.ipynb', kernel_id: 'k3', status: 'released', checkpoint: 'c3' }
      ]
    });
    expect(shutDownAllNote(suspended)).toBe(
      'a.ipynb and b.ipynb are paused and have no running kernel: Shut Down All leaves them alone. ' +
        'It ends the kernel gpu.ipynb keeps in memory while paused. Their checkpoints are kept; Resume brings them back from there.'
    );
    for (const text of [shutDownAllNote(paused), shutDownAllNote(suspended)]) {
      expect(text).not.toMatch(/the running kernel/);
    }
  });

  it('says nothing about Shut Down All when no notebook is paused', () => {
    expect(shutDownAllNote(status())).toBeNull();
    expect(shutDownAllNote(null)).toBeNull();
    const leftRunning = status({
      state: 'paused',
      notebooks: [{ path: 'busy.ipynb', kernel_id: 'k1', status: 'busy' }]
    });
    expect(shutDownAllNote(leftRunning)).toBeNull();
    const resumedNotRestored = status({
      state: 'failed',
      notebooks: [{ path: 'x.ipynb', kernel_id: 'k1', status: 'failed', checkpoint: 'c1' }]
    });
    expect(shutDownAllNote(resumedNotRestored)).toBeNull(); // a failed resume may have started its kernel
  });

  it('is not offered a restore or a rewind "into the running kernel": it has none', () => {
    expect(pausedKernelNote('work/train.ipynb', paused)).toBe(
      'train.ipynb is paused: nothing can be restored into its kernel until it is resumed. Resume it first, then try again.'
    );
    expect(pausedKernelNote('other.ipynb', paused)).toBeNull();
    expect(pausedKernelNote('work/train.ipynb', status())).toBeNull();
    const pausing = status({
      state: 'pausing',
      notebooks: [{ path: 'work/train.ipynb', kernel_id: 'k1', status: 'checkpointed' }]
    });
    expect(pausedKernelNote('work/train.ipynb', pausing)).toBe(
      'train.ipynb is being paused: nothing can be restored into its kernel until it is resumed.'
    );
    expect(pausedKernelNote('other.ipynb', pausing)).toBeNull();
  });
});
