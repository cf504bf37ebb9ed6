/**
 * Galata's Playwright configuration, on Debian's Chromium (/usr/bin/chromium):
 * Playwright's own browser download cannot be reached here, nor its ffmpeg,
 * so no video and no trace.
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const port = process.env.GKEWS_UI_PORT || '8917';
const url = `http://localhost:${port}`;

module.exports = {
  ...baseConfig,
  timeout: 240 * 1000,
  expect: { timeout: 30 * 1000 },
  retries: 0,
  workers: 1,
  reporter: [['list']],
  use: {
    ...baseConfig.use,
    baseURL: url,
    launchOptions: {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu']
    },
    video: 'off',
    trace: 'off',
    screenshot: 'only-on-failure'
  },
  webServer: {
    command: '../.venv/bin/jupyter lab --config jupyter_server_test_config.py',
    url: `${url}/lab`,
    timeout: 180 * 1000,
    reuseExistingServer: false,
    env: { ...process.env, GKEWS_UI_PORT: port }
  }
};
