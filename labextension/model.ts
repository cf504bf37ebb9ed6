import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { display, Display, LEFT_RUNNING, notResumed, resumeOutcome, statusLabel } from './describe';
import { GkewsError, IGkewsApi, INotebookStatus, IStatus } from './types';

export { LEFT_RUNNING };

/** A pause or resume that finished, a failure, or the server coming back. */
export interface ITransition {
  kind: 'paused' | 'resumed' | 'failed' | 'reconnected';
  status: IStatus;
}

/** The timings, in milliseconds; the settings (schema/plugin.json) give them, these are the defaults. */
export interface IModelOptions {
  /** Between status reads while nothing happens. */
  idleInterval?: number;
  /** Between status reads during a pause or resume. */
  busyInterval?: number;
  /** First retry while the server is unreachable; each next one waits about twice as long. */
  retryInterval?: number;
  /** Longest wait between retries while the server is unreachable. */
  maxBackoff?: number;
}

/** The notebook statuses of one still to be brought back by a resume (states.AWAITING_STATUSES). */
const AWAITING = ['released', 'failed', 'suspended', 'kept-running'];

export const DEFAULT_TIMINGS: Required<IModelOptions> = {
  idleInterval: 2000,
  busyInterval: 400,
  retryInterval: 1000,
  maxBackoff: 10000
};

/**
 * Whether this page has its notebooks of a resumed cycle back on their kernels:
 * "ready" is shown only once every open notebook of a resumed kernel answered
 * over its own connection.
 */
export interface IAttachment {
  cycle: number;
  /** Notebook paths still being reconnected. */
  waiting: string[];
  /** Notebook paths that could not be reconnected, with why. */
  failed: Record<string, string>;
}

/**
 * The frontend's view of the session: the last status the server gave,
 * whether the server answers, and what changed. Holds no business logic: it
 * reads `GET status` (with a lumino Poll) and posts the user's actions.
 */
export class GkewsModel {
  constructor(
    readonly api: IGkewsApi,
    options: IModelOptions = {}
  ) {
    this._timings = { ...DEFAULT_TIMINGS, ...options };
    this._poll = new Poll<void, Error>({
      auto: false,
      factory: () => this.read(),
      frequency: this.frequency(),
      name: 'jupyter-gkews:status'
    });
  }

  get status(): IStatus | null {
    return this._status;
  }

  get connected(): boolean {
    return this._connected;
  }

  /** Why the last status read failed (the server may be restarting). */
  get lastError(): string | null {
    return this._lastError;
  }

  get display(): Display {
    return display(this._status, this._connected, this.attachment);
  }

  /** The status bar text, with this page's own work (reconnecting, a queued resume). */
  get label(): string {
    return statusLabel(this._status, this._connected, {
      attachment: this.attachment,
      resumeQueued: this.resumeQueued
    });
  }

  /**
   * This page's reconnection of the current cycle's notebooks: null while it
   * has not started; undefined when this model has no one reconnecting (unit tests).
   */
  get attachment(): IAttachment | null | undefined {
    if (!this._attaching) {
      return undefined;
    }
    const a = this._attachment;
    return a && this._status && a.cycle === this._status.cycle ? a : null;
  }

  /** Someone (reattach.ts) reconnects the notebooks after each resume: "ready" waits for it. */
  expectAttachment(): void {
    this._attaching = true;
  }

  /** When this page first saw each cycle (performance.now()): a kernel socket opened before may be stale. */
  cycleSeenAt(cycle: number): number | undefined {
    return this._cycleSeen.get(cycle);
  }

  /** A pause or resume runs (on the server, or our request is on its way). */
  get busy(): boolean {
    return this._requesting || this._status?.state === 'pausing' || this._status?.state === 'resuming';
  }

  /** A Resume pressed while the pause was still finishing: it is posted once the pause is done. */
  get resumeQueued(): boolean {
    return this._queuedResume !== null;
  }

  /**
   * What the toolbar button does now: pause, resume, queue a resume (while a
   * pause finishes), or nothing.
   */
  get nextAction(): 'pause' | 'resume' | 'queue-resume' | null {
    if (!this._connected || !this._status) {
      return null;
    }
    const s = this._status;
    if (s.state === 'pausing' && !this._requesting) {
      return this._queuedResume === null ? 'queue-resume' : null;
    }
    if (this.busy || this._queuedResume !== null || this.display === 'reconnecting') {
      return null; // a second click of Resume would pause the session it just resumed
    }
    if (s.state === 'paused') {
      return 'resume';
    }
    if (s.state === 'failed') {
      // a failed resume is retried by resuming; a failed pause left the kernels running
      return s.notebooks.some(nb => nb.status === 'released' || nb.status === 'failed') ? 'resume' : 'pause';
    }
    return 'pause';
  }

  /**
   * Notebooks a resume left behind while the session is active (not named in
   * it, or failed in it): Resume brings them back, a pause leaves them as they are.
   */
  get stillToResume(): string[] {
    const s = this._status;
    if (!this._connected || !s || s.state !== 'active' || this.busy) {
      return [];
    }
    return s.notebooks.filter(nb => AWAITING.includes(nb.status) && !!nb.checkpoint).map(nb => nb.path);
  }

  /**
   * Whether a notebook's own toolbar resumes: its last resume failed (its kernel died in it, say) and
   * its checkpoint is kept, while the session is active; `nb` is its entry in the status.
   */
  resumesAlone(nb: INotebookStatus | undefined): boolean {
    return !!nb && this.stillToResume.includes(nb.path) && notResumed(this._status!).includes(nb.path);
  }

  /**
   * Whether a notebook's own toolbar pauses that notebook alone: while the
   * session is paused, a notebook whose kernel runs and that the pause did
   * not release (opened since, or left running by it). `nb` is its entry in
   * the status, if it has one; Resume would bring back the others instead.
   */
  pausesAlone(nb: INotebookStatus | undefined, hasKernel: boolean): boolean {
    const s = this._status;
    if (!this._connected || !s || s.state !== 'paused' || this.busy || this._queuedResume !== null) {
      return false;
    }
    return hasKernel && (!nb || !AWAITING.includes(nb.status));
  }

  /** Notebooks the last pause left running (a busy cell, say) while the others are paused: a pause takes them. */
  get leftRunning(): string[] {
    const s = this._status;
    if (!this._connected || !s || s.state !== 'paused' || this.busy) {
      return [];
    }
    return s.notebooks.filter(nb => LEFT_RUNNING.includes(nb.status)).map(nb => nb.path);
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get transition(): ISignal<this, ITransition> {
    return this._transition;
  }

  /** A queued resume that could not be posted (the pause failed, or the server refused it). */
  get queuedResumeFailed(): ISignal<this, string> {
    return this._queuedResumeFailed;
  }

  /** New timings (from the settings); the next read uses them. */
  configure(options: IModelOptions): void {
    this._timings = { ...DEFAULT_TIMINGS, ...options };
    this._poll.frequency = this.frequency();
  }

  get timings(): Required<IModelOptions> {
    return { ...this._timings };
  }

  /** Read the status once; never throws (an unreachable server is a state). */
  async refresh(): Promise<void> {
    try {
      await this.read();
    } catch {
      // recorded by read(): the status item says the server is unreachable
    }
  }

  async pause(notebooks?: string[], interrupt = false): Promise<IStatus> {
    return this.act(() => this.api.pause(notebooks, interrupt));
  }

  /**
   * Resume; while a pause is still finishing, the resume is queued and posted
   * as soon as the server says paused (the status item says so meanwhile).
   */
  async resume(notebooks?: string[]): Promise<IStatus | null> {
    if (this._status?.state === 'pausing') {
      this._queuedResume = { cycle: this._status.cycle, notebooks };
      this._changed.emit();
      return null;
    }
    return this.act(() => this.api.resume(notebooks));
  }

  /** This page's reconnection of a resumed cycle's notebooks (reattach.ts reports it). */
  setAttachment(attachment: IAttachment | null): void {
    this._attachment = attachment;
    this._changed.emit();
  }

  /** Poll: fast during a transition, slowly otherwise, backing off while the server is away. */
  start(): void {
    if (!this._poll.isDisposed) {
      void this._poll.start();
    }
  }

  /** Read again now (after an action, or when the page becomes visible). */
  poke(): void {
    if (!this._poll.isDisposed && this._poll.state.phase !== 'constructed') {
      void this._poll.refresh();
    }
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  /** One status read: the poll's factory. Rejects while the server is unreachable, so the poll backs off. */
  private async read(): Promise<void> {
    try {
      this.apply(await this.api.status());
    } catch (error) {
      const wasConnected = this._connected;
      this._connected = false;
      this._lastError = error instanceof Error ? error.message : String(error);
      this._poll.frequency = this.frequency();
      if (wasConnected) {
        this._changed.emit();
      }
      throw error;
    }
    this._poll.frequency = this.frequency();
  }

  private frequency() {
    const t = this._timings;
    if (!this._connected && this._everConnected) {
      return { interval: t.retryInterval, backoff: 2, max: Math.max(t.maxBackoff, t.retryInterval) };
    }
    const interval = this.busy || this.resumeQueued ? t.busyInterval : t.idleInterval;
    return { interval, backoff: 2, max: Math.max(t.maxBackoff, interval) };
  }

  private async act(call: () => Promise<IStatus>): Promise<IStatus> {
    this._requesting = true;
    this._changed.emit();
    try {
      const status = await call();
      this.apply(status);
      return status;
    } catch (error) {
      if (error instanceof GkewsError && error.serverStatus) {
        this.apply(error.serverStatus);
      }
      throw error;
    } finally {
      this._requesting = false;
      this._changed.emit();
      this.poke();
    }
  }

  private apply(status: IStatus): void {
    // a reloaded page's first read compares with what this tab read last before the reload: a resume (or a
    // pause) that ended during the reload is announced, with its verdict, as it would have been without it
    const previous = this._status ?? lastSeen();
    rememberSeen(status);
    const reconnected = !this._connected && this._everConnected;
    const same = this._connected && JSON.stringify(previous) === JSON.stringify(status);
    this._status = status;
    this._connected = true;
    this._everConnected = true;
    this._lastError = null;
    if (!this._cycleSeen.has(status.cycle)) {
      this._cycleSeen.set(status.cycle, performance.now());
    }
    if (same) {
      return; // nothing new: views (and an open details dialog) stay as they are
    }
    const kind = transitionKind(previous, status);
    this._changed.emit();
    if (kind) {
      this._transition.emit({ kind, status });
    } else if (reconnected) {
      this._transition.emit({ kind: 'reconnected', status });
    }
    this.postQueuedResume(status);
  }

  /** The pause a queued resume waited for is over: post it, or say why not. */
  private postQueuedResume(status: IStatus): void {
    const queued = this._queuedResume;
    if (!queued || status.state === 'pausing') {
      return;
    }
    this._queuedResume = null;
    if (status.state === 'paused' && status.cycle === queued.cycle) {
      this.act(() => this.api.resume(queued.notebooks)).catch(error =>
        this._queuedResumeFailed.emit((error as Error).message)
      );
    } else {
      this._queuedResumeFailed.emit(
        status.state === 'failed'
          ? 'the pause failed, so there was nothing to resume'
          : `the session became ${status.state} before the pause finished`
      );
      this._changed.emit();
    }
  }

  private _timings: Required<IModelOptions>;
  private _poll: Poll<void, Error>;
  private _status: IStatus | null = null;
  private _connected = false;
  private _everConnected = false;
  private _lastError: string | null = null;
  private _requesting = false;
  private _queuedResume: { cycle: number; notebooks?: string[] } | null = null;
  private _attachment: IAttachment | null = null;
  private _attaching = false;
  private _cycleSeen = new Map<number, number>();
  private _changed = new Signal<this, void>(this);
  private _transition = new Signal<this, ITransition>(this);
  private _queuedResumeFailed = new Signal<this, string>(this);
}

const SEEN_KEY = 'jupyter-gkews:last-status';

/** The state and cycle this tab read last (before a reload), as a status to compare with; null if none. */
function lastSeen(): IStatus | null {
  try {
    const seen = JSON.parse(window.sessionStorage.getItem(SEEN_KEY) ?? 'null');
    return seen && typeof seen.state === 'string' && typeof seen.cycle === 'number'
      ? ({ state: seen.state, cycle: seen.cycle, notebooks: [] } as unknown as IStatus)
      : null;
  } catch {
    return null;
  }
}

function rememberSeen(status: IStatus): void {
  try {
    window.sessionStorage.setItem(SEEN_KEY, JSON.stringify({ state: status.state, cycle: status.cycle }));
  } catch {
    // storage full or turned off: a reload then announces nothing, as before
  }
}

/**
 * Which finished transition separates two statuses, if any. A fast pause may
 * go from active to paused between two reads, so the state reached counts,
 * not the path; the first read of a page (no previous status) announces nothing.
 */
export function transitionKind(previous: IStatus | null, current: IStatus): ITransition['kind'] | null {
  if (!previous) {
    return null;
  }
  const moved = previous.state !== current.state || previous.cycle !== current.cycle;
  if (!moved) {
    return null;
  }
  if (current.state === 'failed') {
    return 'failed';
  }
  if (current.state === 'paused' && (previous.state !== 'paused' || previous.cycle !== current.cycle)) {
    return 'paused';
  }
  if (
    current.state === 'active' &&
    (previous.state === 'resuming' || previous.state === 'paused' || previous.state === 'failed') &&
    current.notebooks.some(resumeOutcome)
  ) {
    return 'resumed';
  }
  return null;
}
