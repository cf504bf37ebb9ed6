import { ISignal, Signal } from '@lumino/signaling';

import { display, Display } from './describe';
import { GkewsError, IGkewsApi, IStatus } from './types';

/** A pause or resume that finished, a failure, or the server coming back. */
export interface ITransition {
  kind: 'paused' | 'resumed' | 'failed' | 'reconnected';
  status: IStatus;
}

export interface IModelOptions {
  /** Milliseconds between status reads while nothing happens. */
  idleInterval?: number;
  /** Milliseconds between status reads during a pause or resume. */
  busyInterval?: number;
  /** Longest wait between retries while the server is unreachable. */
  maxBackoff?: number;
}

/**
 * The frontend's view of the session: the last status the server gave,
 * whether the server answers, and what changed. Holds no business logic: it
 * reads `GET status` and posts the user's actions.
 */
export class GkewsModel {
  constructor(
    readonly api: IGkewsApi,
    options: IModelOptions = {}
  ) {
    this.idleInterval = options.idleInterval ?? 2000;
    this.busyInterval = options.busyInterval ?? 400;
    this.maxBackoff = options.maxBackoff ?? 10000;
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
    return display(this._status, this._connected);
  }

  /** A pause or resume runs (on the server, or our request is on its way). */
  get busy(): boolean {
    return (
      this._requesting ||
      this._status?.state === 'pausing' ||
      this._status?.state === 'resuming'
    );
  }

  /** What the toolbar button does now. */
  get nextAction(): 'pause' | 'resume' | null {
    if (!this._connected || !this._status || this.busy) {
      return null;
    }
    const s = this._status;
    if (s.state === 'paused') {
      return 'resume';
    }
    if (s.state === 'failed') {
      // a failed resume is retried by resuming; a failed pause left the kernels running
      return s.notebooks.some(nb => nb.status === 'released' || nb.status === 'failed')
        ? 'resume'
        : 'pause';
    }
    return 'pause';
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get transition(): ISignal<this, ITransition> {
    return this._transition;
  }

  /** Read the status once; never throws (an unreachable server is a state). */
  async refresh(): Promise<void> {
    try {
      this.apply(await this.api.status());
    } catch (error) {
      const wasConnected = this._connected;
      this._connected = false;
      this._lastError = error instanceof Error ? error.message : String(error);
      if (wasConnected) {
        this._changed.emit();
      }
    }
  }

  async pause(notebooks?: string[]): Promise<IStatus> {
    return this.act(() => this.api.pause(notebooks));
  }

  async resume(notebooks?: string[]): Promise<IStatus> {
    return this.act(() => this.api.resume(notebooks));
  }

  /** Poll: fast during a transition, slowly otherwise, backing off while the server is away. */
  start(): void {
    if (this._timer !== null || this._disposed) {
      return;
    }
    const tick = async () => {
      await this.refresh();
      if (this._disposed) {
        return;
      }
      let delay = this.busy ? this.busyInterval : this.idleInterval;
      if (!this._connected) {
        this._backoff = Math.min(this._backoff ? this._backoff * 2 : 1000, this.maxBackoff);
        delay = this._backoff;
      } else {
        this._backoff = 0;
      }
      this._timer = setTimeout(tick, delay);
    };
    this._timer = setTimeout(tick, 0);
  }

  /** Read again now (after an action, or when the page becomes visible). */
  poke(): void {
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
      this.start();
    }
  }

  dispose(): void {
    this._disposed = true;
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    Signal.clearData(this);
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
    const previous = this._status;
    const reconnected = !this._connected && this._everConnected;
    const same = this._connected && JSON.stringify(previous) === JSON.stringify(status);
    this._status = status;
    this._connected = true;
    this._everConnected = true;
    this._lastError = null;
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
  }

  private idleInterval: number;
  private busyInterval: number;
  private maxBackoff: number;
  private _status: IStatus | null = null;
  private _connected = false;
  private _everConnected = false;
  private _lastError: string | null = null;
  private _requesting = false;
  private _timer: ReturnType<typeof setTimeout> | null = null;
  private _backoff = 0;
  private _disposed = false;
  private _changed = new Signal<this, void>(this);
  private _transition = new Signal<this, ITransition>(this);
}

/**
 * Which finished transition separates two statuses, if any. A fast pause may
 * go from active to paused between two reads, so the state reached counts,
 * not the path; the first read of a page (no previous status) announces nothing.
 */
export function transitionKind(
  previous: IStatus | null,
  current: IStatus
): ITransition['kind'] | null {
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
    current.notebooks.some(nb => nb.verdict)
  ) {
    return 'resumed';
  }
  return null;
}
