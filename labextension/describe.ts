/**
 * Words for what the server says: the status item's label, the resume verdicts,
 * the timeline. Pure functions, so that the wording is unit-tested.
 */
import { INotebookStatus, IProgress, ISkipped, IStatus } from './types';

/** The six things the status item says, plus failed and offline. */
export type Display =
  | 'active'
  | 'pausing'
  | 'paused'
  | 'waiting for capacity'
  | 'restoring'
  | 'ready'
  | 'failed'
  | 'offline';

export function display(status: IStatus | null, connected: boolean): Display {
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
      return status.phase === 'waiting-for-capacity'
        ? 'waiting for capacity'
        : 'restoring';
    default:
      // active after a resume (the notebooks carry verdicts) is "ready"
      return status.notebooks.some(nb => nb.verdict) ? 'ready' : 'active';
  }
}

export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
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
    parts.push(
      `${progress.variables_done ?? 0}/${progress.variables_total} variables`
    );
  }
  if (progress.bytes_done) {
    parts.push(formatBytes(progress.bytes_done));
  }
  return parts.join(', ');
}

/** The status bar text: "GPU session: pausing (checkpointing, 3/14 variables, 12 MB)". */
export function statusLabel(status: IStatus | null, connected: boolean): string {
  const what = display(status, connected);
  if (what === 'offline' || !status) {
    return 'GPU session: server unreachable';
  }
  const detail = [
    status.state === 'pausing' ? status.phase : null,
    progressText(status.progress)
  ].filter(Boolean);
  return `GPU session: ${what}${detail.length ? ` (${detail.join(', ')})` : ''}`;
}

function describeSkipped(name: string, skipped: ISkipped): string {
  const why = (skipped.reason ?? '').match(/cannot pickle '([^']+)'/);
  const what = why ? `a ${why[1]}` : (skipped.reason ?? 'not saved').split(':')[0];
  const cell = skipped.cell ? `, re-run cell ${skipped.cell}` : '';
  return `${name} (${what}${cell})`;
}

/** One notebook's resume, in the words of the issue: "live model verified" or what came back. */
export function verdictText(nb: INotebookStatus): string {
  if (nb.verdict === 'live-verified') {
    return 'live model verified';
  }
  if (nb.verdict === 'failed' || nb.status === 'failed') {
    return `not restored: ${nb.error ?? 'unknown error'}`;
  }
  if (nb.verdict !== 'restored-from-checkpoint') {
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
    parts.push(
      `${skipped.length} skipped: ${skipped.map(([k, v]) => describeSkipped(k, v)).join(', ')}`
    );
  }
  return parts.join('; ');
}

/** What a person should do after a failure, or null when nothing is wrong. */
export function nextStep(status: IStatus): string | null {
  if (status.error?.next_step) {
    return status.error.next_step;
  }
  const broken = status.notebooks.filter(nb => nb.verdict === 'failed');
  if (broken.length) {
    return broken
      .map(nb => `${nb.path}: ${nb.next_step ?? 'resume again, or re-run its cells'}`)
      .join('; ');
  }
  return null;
}

/** Keep a notification within JupyterLab's 140 characters. */
export function clip(text: string, limit = 140): string {
  return text.length <= limit ? text : `${text.slice(0, limit - 1)}…`;
}

/** The notification after a pause or a resume finishes, or after a failure. */
export function transitionMessage(kind: 'paused' | 'resumed' | 'failed', status: IStatus): string {
  if (kind === 'failed') {
    return clip(status.error ? `${status.error.reason} ${status.error.next_step}` : status.message);
  }
  if (kind === 'paused') {
    return clip(`Paused: ${status.message}. Resume brings the kernels back.`);
  }
  const verdicts = status.notebooks
    .filter(nb => nb.verdict)
    .map(nb => (status.notebooks.length > 1 ? `${baseName(nb.path)}: ` : '') + verdictText(nb));
  return clip(`Resumed. ${verdicts.join(' | ') || status.message}`);
}

export function baseName(path: string): string {
  return path.split('/').pop() ?? path;
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
    rows.push({
      label,
      time,
      offset: typeof origin === 'number' && key !== 'last_activity' ? time - origin : null
    });
  }
  return rows;
}
