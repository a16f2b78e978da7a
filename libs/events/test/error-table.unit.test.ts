import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/index.js';

const root = join(import.meta.dirname, '../../..');

describe('the error table in docs/errors.md', () => {
  it('lists exactly the codes of the code, with their retryable flag, kind and meaning', () => {
    const rows = readFileSync(join(root, 'docs/errors.md'), 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('| `'))
      .map((line) => line.split('|').map((cell) => cell.trim()));
    const documented = Object.fromEntries(
      rows.map(([, code, retryable, kind, meaning]) => [
        code!.replaceAll('`', ''),
        { retryable, kind, meaning },
      ]),
    );
    const expected = Object.fromEntries(
      Object.entries(ERROR_CODES).map(([code, info]) => [
        code,
        { retryable: info.retryable ? 'yes' : 'no', kind: info.kind, meaning: info.meaning },
      ]),
    );
    expect(documented).toEqual(expected);
  });

  it('has, for every code, a test that asserts it is produced', () => {
    const testFiles = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
        if (entry.name === 'node_modules' || entry.name === 'dist' || entry.name.startsWith('.')) return [];
        const path = join(dir, entry.name);
        return entry.isDirectory()
          ? testFiles(path)
          : /\.(unit|int|e2e)\.test\.ts$/.test(entry.name)
            ? [path]
            : [];
      });
    const sources = ['libs', 'services', 'test']
      .flatMap((dir) => testFiles(join(root, dir)))
      .map((file) => readFileSync(file, 'utf8'));
    // A code counts as produced where a test asserts it: expectLeaseError(..., 'CODE') or { code: 'CODE' }.
    const untested = Object.keys(ERROR_CODES).filter(
      (code) => !sources.some((source) => new RegExp(`'${code}',?\\s*\\)|code: '${code}'`).test(source)),
    );
    expect(untested).toEqual([]);
  });
});
