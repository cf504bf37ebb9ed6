/**
 * The JSON the server answers under <base_url>gkews/ (docs/rest-api.md), as TypeScript types.
 * jupyter_gkews/schema.py is the source: tests/test_schema.py checks every interface here against it.
 */

export type State = 'active' | 'pausing' | 'paused' | 'resuming' | 'failed';

export interface IProgress {
  notebook?: string;
  notebooks_done?: number;
  notebooks_total?: number;
  variables_done?: number;
  variables_total?: number;
  bytes_done?: number;
}

export interface ISkipped {
  reason?: string;
  cell?: number | null;
  source?: string;
  line?: number;
  lines?: number;
}

export interface INotebookStatus {
  path: string;
  name?: string;
  type?: string;
  session_id?: string;
  kernel_id: string;
  kernel_name?: string;
  status: string;
  checkpoint?: string;
  bytes?: number;
  bytes_written?: number;
  seconds?: number;
  saved?: string[];
  skipped?: Record<string, ISkipped>;
  interrupted?: boolean;
  error?: string | null;
  next_step?: string;
  verdict?: 'live-verified' | 'restored-from-checkpoint' | 'partially-restored' | 'failed' | null;
  why_restored?: string;
  restore_seconds?: number;
  restored?: string[];
  failed?: Record<string, string>;
  skipped_at_save?: Record<string, ISkipped>;
  warnings?: string[];
  same_process?: boolean;
  message?: string;
  gpu?: Record<string, unknown> | null;
  /** During the release: its kernel's pid and start time (a server restarted then stops what outlived it). */
  process?: { pid: number; start: number | null } | null;
  saved_as?: string;
  reopened?: boolean;
  /** Its session's path named no file on this server when paused (a client keeping the notebook elsewhere). */
  no_file?: boolean;
  /** Its file was deleted while paused: not resumed, so no verdict (its checkpoint stays in the store). */
  deleted?: boolean;
  /** Deleted as the resume found it: its file was gone; a later resume brings it back if the file is there again. */
  found_missing?: boolean;
  /** Variables a resume could not restore (name: why), and the checkpoints kept because they hold them. */
  unrestored?: Record<string, string>;
  unrestored_checkpoints?: string[];
  companions?: { path?: string; name?: string; type?: string; session_id?: string }[];
}

export interface IStatus {
  state: State;
  phase: string | null;
  message: string;
  backend: string;
  cycle: number;
  progress: IProgress | null;
  error: { reason: string; next_step: string } | null;
  restored_from?: Record<string, unknown>;
  /** Who asked for this cycle's pause. */
  paused_by?: 'user' | 'idle policy' | 'resume-test';
  timeline: Record<string, number | null>;
  notebooks: INotebookStatus[];
  /** The last pause's snapshot; failed means the resume restores from the checkpoints. */
  snapshot?: { status: string; error?: string } | null;
  updated: number;
  /** Seconds a pause waits for a running cell (GkewsApp.busy_timeout). */
  busy_timeout?: number;
}

export interface ICheckpoint {
  id: string;
  created: string;
  notebook: string;
  bytes: number;
  variables: number;
  skipped: number;
  error?: string;
  /** Kernel undo: an automatic checkpoint, labelled with the cell it was taken after. */
  auto?: boolean;
  label?: { cell: number | null; source: string } | null;
  /** A save of some variables: the ones it holds (`save NAMES`), or the ones it left out (`--exclude`). */
  only?: string[];
  excluded?: string[];
}

export interface ICheckpointNow {
  notebook: string;
  id: string;
  bytes: number;
  bytes_written?: number;
  saved: string[];
  skipped: Record<string, ISkipped>;
  seconds?: number;
}

export interface IRestoreResult {
  notebook: string;
  checkpoint: string;
  restored: string[];
  failed: Record<string, string>;
  skipped_at_save?: Record<string, ISkipped>;
  warnings: string[];
  seconds?: number;
}

/** What the model needs from the server; the real one is in api.ts, tests pass a fake. */
export interface IGkewsApi {
  status(): Promise<IStatus>;
  pause(notebooks?: string[], interrupt?: boolean): Promise<IStatus>;
  resume(notebooks?: string[]): Promise<IStatus>;
  checkpoints(notebook?: string): Promise<ICheckpoint[]>;
  deleteCheckpoint(id: string): Promise<void>;
  checkpointNow(notebook: string): Promise<ICheckpointNow>;
  restore(id: string, notebook: string): Promise<IRestoreResult>;
  auto(notebook: string, action: 'on' | 'off' | 'status'): Promise<{ enabled: boolean }>;
  rewind(notebook: string, cell: number, checkpoint: string): Promise<IRewindResult>;
}

/** What a rewind answers (POST gkews/checkpoints/rewind). */
export interface IRewindResult {
  changed: string[];
  came_back: string[];
  removed: string[];
  failed: Record<string, string>;
  undo_cell: number | null;
}

/** An answer that is not 2xx: the server's message (which names the fix) and the HTTP status. */
export class GkewsError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly serverStatus?: IStatus
  ) {
    super(message);
  }
}
