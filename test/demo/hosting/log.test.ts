// The operator's log: decision lines batched into few writes, in order, and never lost on exit.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { callTool } from 'mcp-request-idempotency/client';
import { describe, expect, it, vi } from 'vitest';
import { BatchedLines, DEFAULT_LOG_FLUSH_MS } from '../../../demo/hosting/log.js';
import { exitedAndRead, waitUntil } from '../../../demo/processes/bounds.js';
import { connectToServer } from '../../../demo/processes/launch.js';

const HERE = dirname(fileURLToPath(import.meta.url));

describe('decision lines, batched', () => {
  it('writes the lines of one interval together, in order, once the interval has passed', () => {
    vi.useFakeTimers();
    try {
      const writes: string[] = [];
      const lines = new BatchedLines(25, (text) => writes.push(text));
      lines.add('a');
      lines.add('b');
      vi.advanceTimersByTime(24);
      expect(writes).toStrictEqual([]);
      vi.advanceTimersByTime(1);
      expect(writes).toStrictEqual(['a\nb\n']);
      lines.add('c');
      vi.advanceTimersByTime(25);
      expect(writes).toStrictEqual(['a\nb\n', 'c\n']);
    } finally {
      vi.useRealTimers();
    }
  });

  it('writes each line at once with no interval, and a flood as soon as it is large', () => {
    const each: string[] = [];
    const immediate = new BatchedLines(0, (text) => each.push(text));
    immediate.add('a');
    immediate.add('b');
    expect(each).toStrictEqual(['a\n', 'b\n']);

    const flood: string[] = [];
    const bounded = new BatchedLines(60_000, (text) => flood.push(text), 2);
    bounded.add('12345');
    expect(flood).toStrictEqual([]);
    bounded.add('67890');
    expect(flood).toStrictEqual(['12345\n67890\n']);
  });

  it('formats each entry only as its batch is written, not as it is added', () => {
    const writes: string[] = [];
    const formatted: number[] = [];
    const lines = new BatchedLines(
      60_000,
      (text) => writes.push(text),
      256,
      (n: number) => {
        formatted.push(n);
        return `line ${n}`;
      },
    );
    lines.add(1);
    lines.add(2);
    expect(formatted).toStrictEqual([]);

    lines.flush();

    expect(formatted).toStrictEqual([1, 2]);
    expect(writes).toStrictEqual(['line 1\nline 2\n']);
  });

  it('writes what is pending when the process exits, and keeps other lines after it', async () => {
    const script = [
      "import { log, logDecision } from './demo/hosting/log.ts';",
      "logDecision({ decision: 'executed', durationMs: 1 });",
      "log({ event: 'other' });",
      "logDecision({ decision: 'replayed', durationMs: 1 });",
      'process.exit(0);',
    ].join('\n');
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: join(HERE, '..', '..', '..'),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    await exitedAndRead(child);
    const events = stderr
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
      .map((entry) => entry.decision ?? entry.event);
    expect(events).toStrictEqual(['executed', 'other', 'replayed']);
  }, 20_000);
});

describe('a server started as users start it, its decision lines batched', () => {
  it('logs every keyed decision, in order, within the flush interval', async () => {
    const server = await connectToServer(['--log-flush-ms', String(DEFAULT_LOG_FLUSH_MS)]);
    try {
      const call = { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey: randomUUID() };
      for (let i = 0; i < 3; i++) await callTool(server.client, call);
      const decided = async () => (await server.decisions()).map((d) => d.decision);
      await waitUntil(async () => (await decided()).length >= 3, 2_000);
      expect(await decided()).toStrictEqual(['executed', 'replayed', 'replayed']);
    } finally {
      await server.close();
    }
  }, 20_000);
});
