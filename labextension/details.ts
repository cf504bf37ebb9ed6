import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { showDialog } from './dialog';
import { formatBytes, nextStep, summarySentence, timelineRows, verdictText } from './describe';
import { GkewsModel } from './model';
import { IStatus } from './types';

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  text?: string,
  className?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (text !== undefined) {
    node.textContent = text;
  }
  if (className) {
    node.className = className;
  }
  return node;
}

function table(headers: string[], rows: string[][], caption: string): HTMLTableElement {
  const t = el('table', undefined, 'jp-gkews-Table');
  t.appendChild(el('caption', caption));
  const head = t.createTHead().insertRow();
  for (const h of headers) {
    const th = el('th', h);
    th.scope = 'col';
    head.appendChild(th);
  }
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    row.forEach(cell => (tr.insertCell().textContent = cell));
  }
  return t;
}

/** The details of the current cycle, built from one status document. */
export function detailsNode(
  status: IStatus | null,
  connected: boolean,
  lastError: string | null,
  label: string
): HTMLElement {
  const root = el('div', undefined, 'jp-gkews-Details');
  root.appendChild(el('p', label, 'jp-gkews-Details-state'));
  if (!connected || !status) {
    root.appendChild(
      el(
        'p',
        `The Jupyter server does not answer (${lastError ?? 'no answer yet'}). The page retries on its own; if it does not come back, restart the server.`
      )
    );
    return root;
  }
  if (status.message) {
    root.appendChild(el('p', summarySentence(status)));
  }
  const step = nextStep(status);
  if (step) {
    const p = el('p', undefined, 'jp-gkews-Details-next');
    p.appendChild(el('strong', 'What to do next: '));
    p.appendChild(document.createTextNode(step));
    root.appendChild(p);
  }

  const rows = timelineRows(status.timeline ?? {});
  if (rows.length) {
    root.appendChild(
      table(
        ['step', 'time', 'after the request'],
        rows.map(r => [
          r.label,
          new Date(r.time * 1000).toLocaleTimeString(),
          r.offset === null ? '' : `${r.offset.toFixed(1)} s`
        ]),
        `Cycle ${status.cycle} (${status.backend} backend)`
      )
    );
  }

  if (status.notebooks.length) {
    root.appendChild(
      table(
        ['notebook', 'state', 'checkpoint', 'verdict'],
        status.notebooks.map(nb => [
          nb.path,
          nb.status,
          nb.checkpoint ? `${nb.checkpoint} (${formatBytes(nb.bytes)})` : '',
          nb.verdict || nb.error ? verdictText(nb) : ''
        ]),
        'Notebooks'
      )
    );
    const lost: string[] = [];
    for (const nb of status.notebooks) {
      for (const [name, s] of Object.entries(nb.skipped_at_save ?? nb.skipped ?? {})) {
        lost.push(
          `${nb.path}: ${name} was not saved: ${s.reason ?? 'unknown reason'}${s.cell ? ` (re-run cell ${s.cell})` : ''}`
        );
      }
      for (const [name, why] of Object.entries(nb.failed ?? {})) {
        lost.push(`${nb.path}: ${name} could not be restored: ${why}`);
      }
      for (const w of nb.warnings ?? []) {
        lost.push(`${nb.path}: ${w}`);
      }
    }
    if (lost.length) {
      root.appendChild(el('h3', 'Skipped or lost'));
      const ul = el('ul');
      lost.forEach(line => ul.appendChild(el('li', line)));
      root.appendChild(ul);
    }
  }
  return root;
}

/** Open the details dialog; it follows the status while it is open. */
export async function showDetails(model: GkewsModel): Promise<void> {
  const body = new Widget();
  body.addClass('jp-gkews-DetailsBody');
  const render = () =>
    body.node.replaceChildren(detailsNode(model.status, model.connected, model.lastError, model.label));
  render();
  model.changed.connect(render);
  void model.refresh();
  try {
    await showDialog({
      title: 'GPU session',
      body,
      buttons: [Dialog.okButton({ label: 'Close', ariaLabel: 'Close the GPU session details' })]
    });
  } finally {
    model.changed.disconnect(render);
  }
}
