import { LabIcon } from '@jupyterlab/ui-components';

// Small inline SVGs in JupyterLab's icon colour classes, so they follow the theme.
const svg = (body: string) =>
  `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">${body}</svg>`;

export const pauseIcon = new LabIcon({
  name: 'jupyter-gkews:pause',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161"><rect x="6" y="4" width="4" height="16" rx="1"/><rect x="14" y="4" width="4" height="16" rx="1"/></g>'
  )
});

export const resumeIcon = new LabIcon({
  name: 'jupyter-gkews:resume',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161"><path d="M7 4.5v15a1 1 0 0 0 1.5.86l12-7.5a1 1 0 0 0 0-1.72l-12-7.5A1 1 0 0 0 7 4.5z"/></g>'
  )
});

export const waitIcon = new LabIcon({
  name: 'jupyter-gkews:wait',
  svgstr: svg('<g class="jp-icon3" fill="#616161"><path d="M12 2a10 10 0 1 0 10 10h-2a8 8 0 1 1-8-8z"/></g>')
});

export const checkpointIcon = new LabIcon({
  name: 'jupyter-gkews:checkpoints',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161"><path d="M5 3h11l3 3v15H5z" opacity=".25"/><path d="M5 3h11l3 3v15H5zm2 2v4h8V5zm5 7a3 3 0 1 0 0 6 3 3 0 0 0 0-6z"/></g>'
  )
});
