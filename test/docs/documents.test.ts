// The documents a reader follows: every relative link leads to a file that is there, every server
// command line they show is one the server accepts, and the front page stays a front page. (The
// library README's code is compiled and run from its tarball by test/e2e/package.test.ts.)

import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseServerArgs } from '../../demo/hosting/cli.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DOCUMENTS = [
  'README.md',
  'packages/idempotency/README.md',
  'packages/checker/README.md',
  ...readdirSync(join(ROOT, 'docs')).map((file) => `docs/${file}`),
];
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

describe('the documents', () => {
  it('keep the front page to 250 lines: the problem, the two commands, the scenarios, where to go next', () => {
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(250);
  });

  it('stay at or under 30,000 words in all, counted as `wc -w` counts them', () => {
    // About two hours of reading: a page that grows must take the words from another, or link to it.
    const pages = [
      'README.md',
      ...readdirSync(join(ROOT, 'docs'))
        .filter((file) => file.endsWith('.md'))
        .map((file) => `docs/${file}`),
      ...readdirSync(join(ROOT, 'packages')).flatMap((pkg) =>
        existsSync(join(ROOT, 'packages', pkg, 'README.md')) ? [`packages/${pkg}/README.md`] : [],
      ),
    ];
    const words = (file: string) =>
      read(file)
        .split(/[ \t\n\r\f\v]+/)
        .filter(Boolean).length;
    const counts = Object.fromEntries(pages.map((file) => [file, words(file)]));
    const total = Object.values(counts).reduce((sum, count) => sum + count, 0);
    expect(total, JSON.stringify(counts, null, 1)).toBeLessThanOrEqual(30_000);
  });

  it.each([...DOCUMENTS.filter((file) => file !== 'README.md'), 'test/conformance/README.md'])(
    '%s says first whom it is for',
    (file) => {
      const firstParagraph =
        read(file)
          .split('\n')
          .slice(1)
          .find((line) => line.trim() !== '') ?? '';
      expect(firstParagraph).toMatch(/^\*?For [^.]+/);
    },
  );

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
            /(npx tsx|node --import tsx) server\.ts( --|$)/.test(line) &&
            !line.includes('[') &&
            !line.includes('inspector'),
        ),
    );
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) {
      const args = (line.split('server.ts')[1] ?? '')
        // A background job's `&`, and what follows it on the line (`& A=$!`), is the shell's.
        .replace(/\s&(\s.*)?$/, '')
        .trim()
        .split(/\s+/)
        .filter(Boolean);
      expect(() => parseServerArgs(args, {}), line).not.toThrow();
    }
  });
});

// --- The house: the README's map of the folders, kept true ---

/** What a repository needs at its top beside the demo's cast: the licence, the lockfile, tool configs. */
const REPOSITORY_FILES = [
  'LICENSE',
  'README.md',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'biome.json',
  'vitest.config.ts',
];

/** The first word of each line of the code block under "## Where things are". */
function mapEntries(): string[] {
  const section = read('README.md').split('## Where things are')[1] ?? '';
  const block = section.split('```')[1] ?? '';
  return block
    .split('\n')
    .map((line) => line.split(/\s+/)[0] ?? '')
    .filter((entry) => entry !== '');
}

const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).trim().split('\n');
/** The folders of the tracked tree at the given depth (1: the top level), each with a trailing slash. */
function foldersAt(depth: number): string[] {
  const folders = tracked
    .map((file) => file.split('/'))
    .filter((parts) => parts.length > depth)
    .map((parts) => `${parts.slice(0, depth).join('/')}/`);
  return [...new Set(folders)].filter((folder) => !folder.startsWith('.'));
}

describe("the README's map of the folders", () => {
  it('names only paths that exist', () => {
    const entries = mapEntries();
    expect(entries.length).toBeGreaterThan(5);
    expect(entries.filter((entry) => !existsSync(join(ROOT, entry)))).toEqual([]);
  });

  it('names every top-level folder, and each folder inside one that holds only folders', () => {
    const named = new Set(mapEntries());
    const unnamed = foldersAt(1).flatMap((top) => {
      if (named.has(top)) return [];
      const children = foldersAt(2).filter((folder) => folder.startsWith(top));
      return children.length === 0 ? [top] : children.filter((child) => !named.has(child));
    });
    expect(unnamed).toEqual([]);
  });

  it("keeps the top level to the demo's cast, the folders it names and what a repository needs", () => {
    const top = new Set(
      tracked.map((file) => file.split('/')[0] ?? '').filter((entry) => !entry.startsWith('.')),
    );
    const named = new Set(mapEntries().map((entry) => entry.split('/')[0] ?? ''));
    const strays = [...top].filter((entry) => !named.has(entry) && !REPOSITORY_FILES.includes(entry));
    expect(strays).toEqual([]);
    expect(top.size).toBeLessThanOrEqual(14);
  });

  it('keeps the test rig where it belongs: no file outside test/ imports from test/', () => {
    const outside = tracked.filter((file) => /\.(ts|mts|mjs)$/.test(file) && !file.startsWith('test/'));
    const importers = outside.filter((file) =>
      [...read(file).matchAll(/(?:from|import)\s*\(?\s*['"](\.\.?\/[^'"]+)['"]/g)].some(([, spec]) =>
        relative(ROOT, join(ROOT, dirname(file), spec ?? '')).startsWith('test/'),
      ),
    );
    expect(importers).toEqual([]);
  });
});
