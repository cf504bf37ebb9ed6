/**
 * Words for what the server says: the status item's label, the resume verdicts,
 * the timeline. Pure functions, so that the wording is unit-tested.
 */
import type { IAttachment } from './model';
import { GkewsError, ICheckpoint, INotebookStatus, IProgress, ISkipped, IStatus } from './types';

/** What a pause left running: not checkpointed (it failed, or a cell kept it busy), so never released. */
export const LEFT_RUNNING = ['not-checkpointed', 'busy'];

/** The things the status item says, plus failed and offline. */
export type Display =
  | 'active'
  | 'pausing'
  | 'paused'
  | 'waiting for capacity'
  | 'restoring'
  | 'reconnecting'
  | 'ready'
  | 'not reconnected'
  | 'not resumed'
  | 'failed'
  | 'offline';

/**
 * The state to show. After a resume the server says active; the page says
 * "ready" only once it has reconnected its open notebooks of the resumed
 * kernels (attachment: undefined when nobody reconnects, as in unit tests of
 * the server's states alone; null when the reconnection has not started).
 */
export function display(status: IStatus | null, connected: boolean, attachment?: IAttachment | null): Display {
  if (!connected || !status) {
    return 'offline';
  }
  switch (status.state) {
    case 'pausing':
      return 'pausing';
    case 'paused':
      return 'paused';
    case 'failed':
      return 'failed';
    case 'resuming':
      return status.phase === 'waiting-for-capacity' ? 'waiting for capacity' : 'restoring';
    default:
      if (!status.notebooks.some(resumeOutcome)) {
        return 'active';
      }
      // active after a resume (the notebooks carry verdicts)
      if (attachment === null || attachment?.waiting.length) {
        return 'reconnecting';
      }
      if (attachment && Object.keys(attachment.failed).length) {
        return 'not reconnected';
      }
      // a notebook whose resume failed (its kernel died in it, say) is not back: Resume is what to do
      return notResumed(status).length ? 'not resumed' : 'ready';
  }
}

export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** A sidebar row: when, how big, how many variables; a save of some variables says which. */
export function checkpointLine(c: ICheckpoint): string {
  if (c.error) {
    return `${c.id}: unreadable (${c.error})`;
  }
  let line = `${new Date(c.created).toLocaleString()} · ${formatBytes(c.bytes)} · ${plural(c.variables, 'variable')} · ${c.skipped} skipped`;
  if (c.only) {
    line += ` · only ${c.only.join(', ') || '(nothing saved)'}`;
  } else if (c.excluded?.length) {
    line += ` · without ${c.excluded.join(', ')}`;
  }
  return line;
}

export function formatBytes(n: number | undefined | null): string {
  if (n === undefined || n === null) {
    return '';
  }
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function progressText(progress: IProgress | null): string {
  if (!progress) {
    return '';
  }
  const parts: string[] = [];
  if (progress.notebooks_total) {
    parts.push(
      `notebook ${Math.min((progress.notebooks_done ?? 0) + 1, progress.notebooks_total)}/${progress.notebooks_total}`
    );
  }
  if (progress.variables_total) {
    parts.push(`${progress.variables_done ?? 0}/${progress.variables_total} variables`);
  }
  if (progress.bytes_done) {
    parts.push(formatBytes(progress.bytes_done));
  }
  return parts.join(', ');
}

/**
 * "train.ipynb", "a.ipynb and b.ipynb", "a.ipynb, b.ipynb and c.ipynb"; a notebook whose file name another
 * one of `among` shares by its path ("x/train.ipynb and y/train.ipynb").
 */
export function names(paths: string[], among: string[] = paths): string {
  const n = paths.map(path => shortName(path, among));
  return n.length <= 1 ? (n[0] ?? '') : `${n.slice(0, -1).join(', ')} and ${n[n.length - 1]}`;
}

/** What the status item adds to the server's state: this page's own work. */
export interface ILabelExtras {
  attachment?: IAttachment | null;
  resumeQueued?: boolean;
}

/** The status bar text: "GPU session: pausing (checkpointing, 3/14 variables, 12 MB)". */
export function statusLabel(status: IStatus | null, connected: boolean, extras: ILabelExtras = {}): string {
  const what = display(status, connected, extras.attachment);
  if (what === 'offline' || !status) {
    return 'GPU session: server unreachable';
  }
  if (what === 'reconnecting') {
    const waiting = extras.attachment?.waiting ?? [];
    return `GPU session: reconnecting ${waiting.length ? names(waiting) : 'the notebooks'}`;
  }
  if (what === 'not reconnected') {
    return `GPU session: ${names(Object.keys(extras.attachment?.failed ?? {}))} not reconnected`;
  }
  if (what === 'not resumed') {
    return `GPU session: ${names(notResumed(status))} not resumed`;
  }
  const detail = [status.state === 'pausing' ? status.phase : null, progressText(status.progress)].filter(Boolean);
  const queued = extras.resumeQueued && status.state === 'pausing' ? '; resume queued' : '';
  // a pause that left a busy notebook's kernel running did not release everything: say which
  const running =
    status.state === 'paused' ? status.notebooks.filter(nb => LEFT_RUNNING.includes(nb.status)).map(nb => nb.path) : [];
  const left = running.length ? `; ${names(running)} still running` : '';
  return `GPU session: ${what}${detail.length ? ` (${detail.join(', ')})` : ''}${queued}${left}`;
}

function describeSkipped(name: string, skipped: ISkipped): string {
  const why = (skipped.reason ?? '').match(/cannot pickle '([^']+)'/);
  const what = why ? `a ${why[1]}` : (skipped.reason ?? 'not saved').split(':')[0];
  const cell = skipped.cell ? `, re-run cell ${skipped.cell}` : '';
  return `${name} (${what}${cell})`;
}

/**
 * The notebooks the last resume failed to bring back, whose checkpoint is kept: a resume again restores
 * them (the server's next step says so). Not one whose checkpoint is gone ("lost"): nothing to resume.
 */
export function notResumed(status: IStatus): string[] {
  return status.notebooks
    .filter(nb => nb.verdict === 'failed' && nb.status === 'failed' && !!nb.checkpoint)
    .map(nb => nb.path);
}

/** Whether a resume says something of this notebook: its verdict, or that it was deleted while paused. */
export function resumeOutcome(nb: INotebookStatus): boolean {
  return Boolean(nb.verdict || nb.deleted);
}

/** One notebook's resume, in the words of the issue: "live model verified" or what came back. */
export function verdictText(nb: INotebookStatus): string {
  if (nb.deleted) {
    return 'deleted while paused: not resumed';
  }
  if (nb.verdict === 'live-verified') {
    return 'live model verified';
  }
  if (nb.verdict === 'failed' || nb.status === 'failed') {
    return `not restored: ${nb.error ?? 'unknown error'}`;
  }
  if (nb.verdict !== 'restored-from-checkpoint' && nb.verdict !== 'partially-restored') {
    return nb.status;
  }
  const restored = nb.restored ?? [];
  const parts = [`restored from checkpoint: ${plural(restored.length, 'variable')}`];
  const failed = Object.keys(nb.failed ?? {});
  if (failed.length) {
    parts.push(`${failed.length} failed: ${failed.join(', ')}`);
  }
  const skipped = Object.entries(nb.skipped_at_save ?? {});
  if (skipped.length) {
    parts.push(`${skipped.length} skipped: ${skipped.map(([k, v]) => describeSkipped(k, v)).join(', ')}`);
  }
  return parts.join('; ');
}

/** What a person should do after a failure, or null when nothing is wrong. */
export function nextStep(status: IStatus): string | null {
  if (status.error?.next_step) {
    return status.error.next_step;
  }
  // partially-restored: its next_step says how to get back what did not come back
  // a notebook deleted while paused: its next_step says how to restore its checkpoint elsewhere
  const broken = status.notebooks.filter(
    nb => nb.verdict === 'failed' || nb.verdict === 'partially-restored' || nb.deleted
  );
  if (broken.length) {
    return broken.map(nb => `${nb.path}: ${nb.next_step ?? 'resume again, or re-run its cells'}`).join('; ');
  }
  return null;
}

/** "its kernel" or "their kernels". */
function their(n: number, what: string): string {
  return n === 1 ? `its ${what}` : `their ${what}s`;
}

/**
 * One resumed notebook, as a sentence: "Resumed train.ipynb from its checkpoint: 4 variables restored."
 * `among`: the paths of the notebooks named beside it (one of the same file name makes it go by its path).
 */
export function resumedSentence(nb: INotebookStatus, among: string[] = [nb.path]): string {
  const name = shortName(nb.path, among);
  if (nb.deleted) {
    const kept = nb.checkpoint ? `; its checkpoint ${nb.checkpoint} stays in the store` : '';
    return `${name} was deleted while paused: not resumed${kept}.`;
  }
  if (nb.verdict === 'live-verified') {
    return `Resumed ${name}; its live model was verified.`;
  }
  if (nb.verdict !== 'restored-from-checkpoint' && nb.verdict !== 'partially-restored') {
    return `${name} was not restored: ${nb.error ?? 'unknown error'}.`;
  }
  const parts = [`Resumed ${name} from its checkpoint: ${plural((nb.restored ?? []).length, 'variable')} restored`];
  const failed = Object.keys(nb.failed ?? {});
  if (failed.length) {
    parts.push(`${names(failed)} could not be restored`);
  }
  const skipped = Object.entries(nb.skipped_at_save ?? {});
  if (skipped.length) {
    parts.push(
      `${skipped.map(([k, v]) => describeSkipped(k, v)).join(', ')} ${skipped.length === 1 ? 'was' : 'were'} not saved`
    );
  }
  return `${parts.join('; ')}.`;
}

/** Paused notebooks whose kernel process lives on (local GPU suspend); a resume brings them back live. */
const LIVE_STATUSES = ['suspended', 'kept-running'];

/** What a resume waits for: the server's per-notebook words ("waiting for capacity: ...; held by pid 42"). */
function waitingFor(status: IStatus): string {
  const said = status.notebooks.map(nb => nb.message).filter(m => m && m.startsWith('waiting for capacity'));
  return said.length ? [...new Set(said)].join('; ') : 'waiting for capacity';
}

/** The notebooks a pause released, as a sentence: "Paused train.ipynb; Resume brings its kernel back." */
export function pausedSentence(status: IStatus): string {
  const paused = status.notebooks.filter(nb => nb.status === 'released' || LIVE_STATUSES.includes(nb.status));
  const released = paused.map(nb => nb.path);
  const all = status.notebooks.map(nb => nb.path);
  const left = status.notebooks.filter(nb => !paused.includes(nb));
  const parts: string[] = [];
  if (released.length) {
    parts.push(`${pausedBy(status)} ${names(released, all)}; Resume brings ${their(released.length, 'kernel')} back.`);
  } else {
    parts.push('Paused; no notebook had a kernel to release.');
  }
  if (status.snapshot?.status === 'failed') {
    parts.push(
      `The snapshot failed, so Resume restores ${released.length === 1 ? 'it' : 'them'} from ${their(released.length, 'checkpoint')}.`
    );
  }
  for (const nb of paused) {
    if (LIVE_STATUSES.includes(nb.status) && nb.message) {
      // local GPU suspend: the process lives on ("suspended in host memory (4.0 GiB)")
      parts.push(`${shortName(nb.path, all)}: ${nb.message}.`);
    }
  }
  for (const nb of left) {
    if (nb.deleted) {
      parts.push(resumedSentence(nb).replace('not resumed', 'Resume does not bring it back'));
    } else if (nb.status === 'lost') {
      // the server stopped before its checkpoint was written: its kernel is gone, nothing to resume
      parts.push(`${baseName(nb.path)} was not paused: ${nb.error ?? 'it has no checkpoint'}.`);
    } else {
      parts.push(`${baseName(nb.path)} is still running: ${nb.error ?? nb.status}.`);
    }
  }
  return parts.join(' ');
}

/**
 * A pause from paused that paused nothing (the notebooks it named were busy): the server says "nothing more was
 * paused: ..."; a "Paused a.ipynb" toast credited it with the earlier pause.
 */
export function pausedNothingMore(status: IStatus): boolean {
  return status.state === 'paused' && status.message.startsWith('nothing more was paused');
}

function nothingMorePausedSentence(status: IStatus): string {
  const all = status.notebooks.map(nb => nb.path);
  const still = status.notebooks.filter(nb => nb.status === 'released' || LIVE_STATUSES.includes(nb.status));
  const running = status.notebooks.filter(nb => !still.includes(nb) && !nb.deleted && nb.status !== 'lost');
  const parts = running.map(nb => `${shortName(nb.path, all)} is still running: ${nb.error ?? nb.status}.`);
  if (still.length) {
    parts.push(
      `Still paused: ${names(
        still.map(nb => nb.path),
        all
      )}.`
    );
  }
  return `Nothing more was paused. ${parts.join(' ')}`;
}

/** "Paused", or who paused and after how long without use, when the idle policy did. */
function pausedBy(status: IStatus): string {
  if (status.paused_by !== 'idle policy') {
    return 'Paused';
  }
  const { last_activity: last, pause_requested: asked } = status.timeline ?? {};
  const minutes = typeof last === 'number' && typeof asked === 'number' ? Math.round((asked - last) / 60) : null;
  if (minutes === null) {
    return 'The idle policy paused';
  }
  const idle = minutes < 120 ? `${minutes} min` : `${Math.round(minutes / 60)} h`;
  return `Unused for ${idle}, the idle policy paused`;
}

/** The notebooks a pause released or holds (their kernel lives on, suspended): none runs a cell now. */
function pausedNotebooks(status: IStatus | null): INotebookStatus[] {
  return (status?.notebooks ?? []).filter(
    nb => (nb.status === 'released' || LIVE_STATUSES.includes(nb.status)) && !!nb.checkpoint
  );
}

/**
 * What JupyterLab's "Shut Down All" (Kernel menu, running panel) does to the paused notebooks, or null when
 * none is: its dialog asks to "permanently shut down the running kernel", yet a released notebook has none,
 * and every paused one keeps the checkpoint Resume brings it back from.
 */
export function shutDownAllNote(status: IStatus | null): string | null {
  const paused = pausedNotebooks(status);
  if (!paused.length) {
    return null;
  }
  const live = paused.filter(nb => LIVE_STATUSES.includes(nb.status)).map(nb => nb.path);
  const released = paused.filter(nb => !LIVE_STATUSES.includes(nb.status)).map(nb => nb.path);
  const one = paused.length === 1;
  const parts: string[] = [];
  if (released.length) {
    const single = released.length === 1;
    parts.push(
      `${names(released)} ${single ? 'is' : 'are'} paused and ${single ? 'has' : 'have'} no running kernel: ` +
        `Shut Down All leaves ${single ? 'it' : 'them'} alone.`
    );
  }
  if (live.length) {
    const single = live.length === 1;
    parts.push(
      `It ends the ${single ? 'kernel' : 'kernels'} ${names(live)} ${single ? 'keeps' : 'keep'} in memory while paused.`
    );
  }
  parts.push(
    `${one ? 'Its checkpoint is' : 'Their checkpoints are'} kept; Resume brings ${one ? 'it' : 'them'} back from there.`
  );
  return parts.join(' ');
}

/**
 * Why nothing can be restored (or rewound) into a notebook's kernel now, nor its automatic checkpoints
 * switched, or null when it can: it is paused, or a pause is taking it (the server refuses both meanwhile).
 */
export function pausedKernelNote(path: string, status: IStatus | null): string | null {
  if (pausedNotebooks(status).some(nb => nb.path === path)) {
    return `${baseName(path)} is paused: nothing can be restored into its kernel until it is resumed. Resume it first, then try again.`;
  }
  if (status?.state === 'pausing' && status.notebooks.some(nb => nb.path === path)) {
    return `${baseName(path)} is being paused: nothing can be restored into its kernel until it is resumed.`;
  }
  return null;
}

/**
 * The notebook whose resume needs checkpoint `id`, as the server pins it (paused, pausing or resuming; once
 * active, left behind by a resume; or holding variables a resume could not restore), or null: deleting it is
 * refused (409).
 */
export function resumesFrom(id: string, status: IStatus | null): string | null {
  for (const nb of status?.notebooks ?? []) {
    const awaiting = ['released', 'failed', ...LIVE_STATUSES].includes(nb.status);
    const resumes = nb.checkpoint === id && (status!.state === 'active' ? awaiting : nb.status !== 'resumed');
    if (resumes || (nb.unrestored_checkpoints ?? []).includes(id)) {
      return nb.path;
    }
  }
  return null;
}

/** What the session is doing, as a sentence (the status item's tooltip and the details). */
export function summarySentence(status: IStatus): string {
  const paths = status.notebooks.map(nb => nb.path);
  const which = names(paths) || 'the notebooks';
  switch (status.state) {
    case 'pausing': {
      const doing: Record<string, string> = {
        checkpointing: 'writing the checkpoints',
        snapshotting: 'taking a snapshot',
        releasing: `releasing ${paths.length === 1 ? 'the kernel' : 'the kernels'}`
      };
      return `Pausing ${which}: ${doing[status.phase ?? ''] ?? 'starting'}.`;
    }
    case 'paused':
      return pausedSentence(status);
    case 'resuming':
      return status.phase === 'waiting-for-capacity'
        ? `Resuming ${which}: ${waitingFor(status)}.`
        : `Resuming ${which}: ${status.phase === 'verifying' ? 'verifying and restoring' : 'starting'} ${paths.length === 1 ? 'the kernel' : 'the kernels'}.`;
    case 'failed':
      return status.error ? `${status.error.reason} ${status.error.next_step}` : status.message;
    default:
      return status.notebooks.some(resumeOutcome)
        ? status.notebooks
            .filter(resumeOutcome)
            .map(nb => resumedSentence(nb, paths))
            .join(' ')
        : 'The kernels run; Pause checkpoints them and releases the GPU.';
  }
}

/** Keep a notification within JupyterLab's 140 characters. */
export function clip(text: string, limit = 140): string {
  return text.length <= limit ? text : `${text.slice(0, limit - 1)}…`;
}

/** The server's words with each notebook named by its file name: a toast has 140 characters. */
function withFileNames(text: string, status: IStatus): string {
  const all = status.notebooks.map(nb => nb.path);
  const paths = all.filter(path => shortName(path, all) !== path);
  return paths.sort((a, b) => b.length - a.length).reduce((t, path) => t.split(path).join(baseName(path)), text);
}

/**
 * The notification after a pause or a resume finishes, or after a failure,
 * whole: toast() shows its first 140 characters and offers the rest.
 */
export function transitionMessage(kind: 'paused' | 'resumed' | 'failed', status: IStatus): string {
  if (kind === 'failed') {
    if (!status.error) {
      return withFileNames(status.message, status);
    }
    // the reason names each notebook's cause and fix, then the general next step
    const reason = withFileNames(status.error.reason, status);
    return `${reason} ${withFileNames(status.error.next_step, status)}`;
  }
  if (kind === 'paused') {
    if (pausedNothingMore(status)) {
      return nothingMorePausedSentence(status);
    }
    // a resume a server restart cut short comes back paused: "Paused ..." alone read as a new pause
    const cut = status.message.startsWith('the server stopped during a resume')
      ? 'The resume did not finish: the server restarted during it. '
      : '';
    return cut + pausedSentence(status);
  }
  const resumed = status.notebooks.filter(resumeOutcome);
  const all = status.notebooks.map(nb => nb.path);
  return resumed.length
    ? resumed.map(nb => resumedSentence(nb, all)).join(' ')
    : 'Resumed; no notebook had a checkpoint to restore.';
}

export function baseName(path: string): string {
  return path.split('/').pop() ?? path;
}

/** A notebook's file name, or its path where another of `among` has the same file name (x/ and y/train.ipynb). */
export function shortName(path: string, among: string[]): string {
  const name = baseName(path);
  return among.some(other => other !== path && baseName(other) === name) ? path : name;
}

const TIMELINE: [string, string][] = [
  ['last_activity', 'last activity'],
  ['pause_requested', 'pause requested'],
  ['checkpoint_done', 'checkpoints written'],
  ['snapshot_ready', 'snapshot ready'],
  ['environment_stopped', 'kernels released'],
  ['resume_requested', 'resume requested'],
  ['capacity_obtained', 'capacity obtained'],
  ['kernels_started', 'kernels started'],
  ['restore_done', 'restored and verified'],
  ['kernel_usable', 'first cell ran (kernel usable)']
];

export interface ITimelineRow {
  label: string;
  time: number;
  /** Seconds since the pause was requested (since the resume, for resume steps). */
  offset: number | null;
}

/** The cycle's steps in order, each with its time and its delay from the request that started it. */
export function timelineRows(timeline: Record<string, number | null>): ITimelineRow[] {
  const rows: ITimelineRow[] = [];
  for (const [key, label] of TIMELINE) {
    const time = timeline[key];
    if (typeof time !== 'number') {
      continue;
    }
    const resumeStep = TIMELINE.findIndex(t => t[0] === key) >= 5;
    const origin = resumeStep ? timeline.resume_requested : timeline.pause_requested;
    // a step before its request is an earlier attempt's (a cell run after a resume that left a notebook behind,
    // before its retry): its time stands, a negative delay would say nothing true
    const measured = typeof origin === 'number' && key !== 'last_activity' && time >= origin;
    rows.push({ label, time, offset: measured ? time - origin : null });
  }
  return rows;
}

/**
 * A Pause or Resume the server refused (409) because another tab, or the idle policy, did it meanwhile: what
 * to say instead of "Resume failed" (two tabs pressed Resume together: both resumed, one said it failed).
 * null for a refusal that is one.
 */
export function doneElsewhere(action: 'pause' | 'resume', error: unknown): string | null {
  const now = error instanceof GkewsError && error.status === 409 ? error.serverStatus : undefined;
  if (!now) {
    return null;
  }
  if (action === 'resume' && now.state === 'resuming') {
    return 'A resume is already under way (from another tab): the notebooks come back when it is done.';
  }
  if (action === 'resume' && now.state === 'active' && now.notebooks.some(resumeOutcome)) {
    return 'Already resumed (from another tab).';
  }
  if (action === 'pause' && now.state === 'pausing') {
    return 'A pause is already under way (from another tab or the idle policy).';
  }
  if (action === 'pause' && now.state === 'paused') {
    return 'Already paused (from another tab or the idle policy): Resume brings the kernels back.';
  }
  return null;
}
