/** A server status for the tests: active, cycle 0, no notebooks, unless told otherwise. */
import { IStatus } from '../types';

export function status(overrides: Partial<IStatus> = {}): IStatus {
  return {
    state: 'active',
    phase: null,
    message: '',
    backend: 'local',
    cycle: 0,
    progress: null,
    error: null,
    timeline: {},
    notebooks: [],
    updated: 0,
    ...overrides
  };
}
