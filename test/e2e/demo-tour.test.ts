// `npm run demo:all` as a reader runs it: every scenario, 0 to 19, with every backend this machine
// has. Its output is read in order, so the reader must meet each scenario's lines under its own
// heading, and the closing table must read as columns.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { INSTALL_TIMEOUT_MS, START_TIMEOUT_MS } from '../../demo/processes/bounds.js';

const ROOT = join(import.meta.dirname, '..', '..');

function demoAll(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      'npm',
      ['run', '-s', 'demo:all'],
      { cwd: ROOT, timeout: INSTALL_TIMEOUT_MS + 10 * START_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
    );
  });
}

/**
 * The lines that name a scenario out of turn: each line naming "Scenario N" (or "Scenarios N–M")
 * must be about the scenario under way or the next one, never one further on.
 */
function outOfTurn(lines: string[]): string[] {
  let current = -1;
  const found: string[] = [];
  for (const line of lines) {
    const named = /Scenarios? (\d+)(?:–(\d+))?/.exec(line);
    if (!named) continue;
    const first = Number(named[1]);
    if (first !== current && first !== current + 1) found.push(line);
    if (line.startsWith('== ')) current = Number(named[2] ?? named[1]);
  }
  return found;
}

describe('the full tour', () => {
  it(
    'prints every scenario under its own heading, in order, and ends with a table whose columns align',
    async () => {
      const { code, stdout, stderr } = await demoAll();
      // Every expectation held first: a tour cut short has no summary to read, and its last lines
      // say why.
      expect(code, `${stdout.slice(-4000)}\n${stderr.slice(-2000)}`).toBe(0);
      const lines = stdout.split('\n');
      expect(lines[0]).toContain('capabilities.tools.idempotency');
      expect(outOfTurn(lines)).toStrictEqual([]);
      const headings = lines.flatMap((line) => /^== Scenario (\d+):/.exec(line)?.[1] ?? []).map(Number);
      expect(headings).toStrictEqual([...headings].sort((a, b) => a - b));
      expect(headings).toContain(14);
      expect(headings).toContain(15);

      const rows = lines
        .slice(lines.indexOf('== Summary: every scenario') + 1)
        .filter((l) => /^ {2}[✓✗] {2}/.test(l));
      expect(rows.some((row) => / 9 /.test(row.slice(0, 8)))).toBe(true);
      expect(rows.some((row) => /14 /.test(row.slice(0, 8)))).toBe(true);
      // The names start in one column, the counts in another, at one- and two-digit numbers alike.
      const nameColumns = new Set(rows.map((row) => row.search(/(?<=^ {2}[✓✗] {2} ?\d+ )\S/)));
      const countColumns = new Set(rows.map((row) => row.search(/\d+ of \d+ held$/)));
      expect([...nameColumns]).toHaveLength(1);
      expect([...countColumns]).toHaveLength(1);
      expect(stdout).toMatch(
        /\nAll \d+ expectations held, in \d+ s(, \d+ s of it installing test\/interop\/)?\.\n/,
      );
    },
    INSTALL_TIMEOUT_MS + 10 * START_TIMEOUT_MS,
  );
});
