// ESLint for the frontend's TypeScript; formatting is prettier's job (.prettierrc), not ESLint's.
module.exports = {
  root: true,
  parser: '@typescript-eslint/parser',
  parserOptions: { project: 'tsconfig.eslint.json', sourceType: 'module' },
  plugins: ['@typescript-eslint'],
  extends: ['eslint:recommended', 'plugin:@typescript-eslint/recommended'],
  env: { browser: true, es2018: true, node: true, jest: true },
  ignorePatterns: ['lib/', 'node_modules/', 'jupyter_gkews/labextension/', 'ui-tests/', '*.js'],
  // as in JupyterLab's extension template: `namespace CommandIDs` is its convention, `any` is allowed
  rules: {
    '@typescript-eslint/no-namespace': 'off',
    '@typescript-eslint/no-explicit-any': 'off',
    '@typescript-eslint/no-unused-vars': ['error', { args: 'none' }],
    '@typescript-eslint/naming-convention': [
      'error',
      { selector: 'interface', format: ['PascalCase'], custom: { regex: '^I[A-Z]', match: true } }
    ],
    eqeqeq: ['error', 'smart'],
    curly: ['error', 'all']
  }
};
