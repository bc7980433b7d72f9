// A folder of one test file's own in the system's temporary directory, removed once its tests have
// run: where the SQLite tests keep their database files.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

export interface TempFolder {
  readonly dir: string;
  /** A path in the folder no other call has named: `<n>.sqlite`. */
  newFile(): string;
}

/** Call at a test file's top level: the folder goes when the file's tests are done. */
export function tempFolder(name: string): TempFolder {
  const dir = mkdtempSync(join(tmpdir(), `sep3182-${name}-`));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let files = 0;
  return { dir, newFile: () => join(dir, `${++files}.sqlite`) };
}
