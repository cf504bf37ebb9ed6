// Unit tests of the frontend model and its wording: plain TypeScript, a mocked REST client, no DOM;
// and one guard on a private JupyterLab API, run against the installed (ES module) JupyterLab packages.
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/labextension'],
  testMatch: ['**/__tests__/**/*.spec.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }],
    '^.+\\.js$': ['ts-jest', { tsconfig: { allowJs: true, module: 'commonjs', target: 'ES2018' }, isolatedModules: true }]
  },
  // JupyterLab's packages ship ES modules: compile them to CommonJS for jest
  transformIgnorePatterns: ['/node_modules/(?!@jupyterlab/)']
};
