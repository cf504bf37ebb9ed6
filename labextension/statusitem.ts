import { Widget } from '@lumino/widgets';

import { summarySentence } from './describe';
import { GkewsModel } from './model';

/**
 * The status bar item: "GPU session: <state> (<phase>, <progress>)". It is a
 * button: clicking it (or Enter/Space) opens the details.
 */
export class GkewsStatusItem extends Widget {
  constructor(
    private model: GkewsModel,
    private openDetails: () => void
  ) {
    super({ node: document.createElement('button') });
    this.addClass('jp-gkews-StatusItem');
    this.node.setAttribute('type', 'button');
    this.node.dataset.gkewsState = 'offline';
    this.node.addEventListener('click', () => this.openDetails());
    model.changed.connect(this.render, this);
    this.render();
  }

  private render(): void {
    const label = this.model.label;
    const node = this.node as HTMLButtonElement;
    node.textContent = label;
    node.dataset.gkewsState = this.model.display;
    node.setAttribute('aria-label', `${label}. Show the details of the GPU session`);
    node.title = this.model.connected
      ? `${this.model.status ? summarySentence(this.model.status) : label}\nClick for the timeline, verdicts and next steps.`
      : `The Jupyter server does not answer (${this.model.lastError ?? 'no answer yet'}); retrying.`;
  }
}
