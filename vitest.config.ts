import { defineConfig } from 'vitest/config';

// Workspace packages resolve to their TypeScript sources through the "source" export condition.
const resolve = { conditions: ['source', 'import', 'default'] };

export default defineConfig({
  resolve,
  ssr: { resolve: { conditions: ['source', 'import', 'default'], externalConditions: ['source'] } },
  test: {
    projects: [
      {
        resolve,
        test: {
          name: 'unit',
          include: ['libs/*/test/**/*.unit.test.ts', 'services/*/test/**/*.unit.test.ts'],
        },
      },
      {
        resolve,
        test: {
          name: 'int',
          include: [
            'libs/*/test/**/*.int.test.ts',
            'services/*/test/**/*.int.test.ts',
            'test/int/**/*.int.test.ts',
          ],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        resolve,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.e2e.test.ts'],
          // Services run as processes and some tests bound how fast a process tree dies:
          // one file at a time keeps those bounds about the code, not about a busy machine.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
