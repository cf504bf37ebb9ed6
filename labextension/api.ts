import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { GkewsError, ICheckpoint, ICheckpointNow, IGkewsApi, IRestoreResult, IRewindResult, IStatus } from './types';

/**
 * The REST client: every call goes through ServerConnection, so the page's
 * token/XSRF cookie and base URL apply.
 */
export class GkewsApi implements IGkewsApi {
  constructor(private settings: ServerConnection.ISettings) {}

  status(): Promise<IStatus> {
    return this.request<IStatus>('status');
  }

  pause(notebooks?: string[], interrupt = false): Promise<IStatus> {
    return this.request<IStatus>('pause', 'POST', {
      ...(notebooks ? { notebooks } : {}),
      ...(interrupt ? { interrupt } : {})
    });
  }

  resume(notebooks?: string[]): Promise<IStatus> {
    return this.request<IStatus>('resume', 'POST', notebooks ? { notebooks } : {});
  }

  async checkpoints(notebook?: string): Promise<ICheckpoint[]> {
    const query = notebook ? `?notebook=${encodeURIComponent(notebook)}` : '';
    const reply = await this.request<{ checkpoints: ICheckpoint[] }>(`checkpoints${query}`);
    return reply.checkpoints;
  }

  async deleteCheckpoint(id: string): Promise<void> {
    await this.request<void>(`checkpoints/${encodeURIComponent(id)}`, 'DELETE');
  }

  checkpointNow(notebook: string): Promise<ICheckpointNow> {
    return this.request<ICheckpointNow>('checkpoints/now', 'POST', { notebook });
  }

  restore(id: string, notebook: string): Promise<IRestoreResult> {
    return this.request<IRestoreResult>(`checkpoints/${encodeURIComponent(id)}/restore`, 'POST', { notebook });
  }

  /** Kernel undo in the notebook's kernel: switch automatic checkpoints, or read whether they are on. */
  auto(notebook: string, action: 'on' | 'off' | 'status'): Promise<{ enabled: boolean }> {
    return this.request<{ enabled: boolean }>('checkpoints/auto', 'POST', { notebook, action });
  }

  rewind(notebook: string, cell: number, checkpoint: string): Promise<IRewindResult> {
    return this.request<IRewindResult>('checkpoints/rewind', 'POST', { notebook, cell, checkpoint });
  }

  private async request<T>(path: string, method = 'GET', body?: unknown): Promise<T> {
    const url = URLExt.join(this.settings.baseUrl, 'gkews', path);
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new GkewsError(`the Jupyter server cannot be reached (${String(error)}); it may be restarting`, 0);
    }
    const text = await response.text();
    let data: any = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { message: text };
      }
    }
    if (!response.ok) {
      const message = data?.message ?? `${method} gkews/${path} answered ${response.status}`;
      throw new GkewsError(message, response.status, data?.status);
    }
    return data as T;
  }
}
