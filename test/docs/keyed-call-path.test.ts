// The path of one keyed call, as docs/how-it-works.md lists it for a reader to follow: measured in
// a real stdio server (test/support/call-path.ts), so a file that joins the path, or leaves it,
// shows in the document or fails here.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS } from '../../demo/processes/bounds.js';
import { ROOT } from '../../demo/processes/launch.js';
import { measureKeyedCallPath, type PathFile } from '../support/call-path.js';

/** The files the section's table names, one a row, in its order. */
function documentedPath(): string[] {
  const page = readFileSync(join(ROOT, 'docs', 'how-it-works.md'), 'utf8');
  const section = page.split('\n## The path of one keyed call\n')[1]?.split('\n## ')[0];
  if (section === undefined)
    throw new Error('docs/how-it-works.md has no section "The path of one keyed call"');
  return [...section.matchAll(/^\| `([^`]+)` \|/gm)].flatMap(([, file]) => (file ? [file] : []));
}

describe('the path of one keyed call, executed then replayed (stdio, memory)', () => {
  let path: PathFile[];
  beforeAll(async () => {
    path = await measureKeyedCallPath();
  }, START_TIMEOUT_MS * 2);

  it('runs through the files docs/how-it-works.md lists, and no others', () => {
    const documented = documentedPath();
    expect(new Set(documented).size, 'a file listed twice').toBe(documented.length);
    expect(path.map(({ file }) => file).sort()).toEqual([...documented].sort());
  });

  it('reaches the algorithm, the store and the tool', () => {
    const ran = new Map(path.map(({ file, functions }) => [file, functions.map(({ name }) => name)]));
    expect(ran.get('packages/idempotency/core/guard.ts')).toEqual(
      expect.arrayContaining(['guardToolCall', 'executeOnce']),
    );
    expect(ran.get('packages/idempotency/stores/memory.ts')).toEqual(
      expect.arrayContaining(['claim', 'complete']),
    );
    // The ledger charged once: the replay ran none of its code a second time. (V8 counts an async
    // function again each time it resumes after an await; this one awaits nothing below the limit.)
    const charge = path
      .find(({ file }) => file === 'ledger.ts')
      ?.functions.find(({ name }) => name === 'declineOverLimit');
    expect(charge?.calls).toBe(1);
  });
});
