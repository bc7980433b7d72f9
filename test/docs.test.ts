// The documents a reader follows: every relative link leads to a file that is there, every server
// command line they show is one the server accepts, and the front page stays a front page. (The
// library README's code is compiled and run from its tarball by package.test.ts.)

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseServerArgs } from '../hosting/cli.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const DOCUMENTS = [
  'README.md',
  'RELIABILITY.md',
  'packages/idempotency/README.md',
  'packages/checker/README.md',
  ...readdirSync(join(ROOT, 'docs')).map((file) => `docs/${file}`),
];
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

describe('the documents', () => {
  it('keep the front page to 250 lines: the problem, the two commands, the scenarios, where to go next', () => {
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(250);
  });

  it.each(DOCUMENTS)('%s links only to files that exist', (file) => {
    const broken: string[] = [];
    for (const [, target] of read(file).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (!target || /^[a-z]+:/.test(target) || target.startsWith('#')) continue;
      const path = join(ROOT, dirname(file), target.split('#')[0] ?? '');
      if (!existsSync(path)) broken.push(`${target} (${relative(ROOT, path)})`);
    }
    expect(broken).toEqual([]);
  });

  it('show only server command lines the server accepts', () => {
    const lines = DOCUMENTS.flatMap((file) =>
      read(file)
        .split('\n')
        // The synopsis (`[--http …]`) is not a command; after the Inspector's, the rest is the Inspector's.
        .filter(
          (line) =>
            /npx tsx server\.ts( --|$)/.test(line) && !line.includes('[') && !line.includes('inspector'),
        ),
    );
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) {
      const args = (line.split('server.ts')[1] ?? '')
        .replace(/&\s*$/, '')
        .trim()
        .split(/\s+/)
        .filter(Boolean);
      expect(() => parseServerArgs(args, {}), line).not.toThrow();
    }
  });
});
