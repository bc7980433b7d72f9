// The dead-holder tests' holder: a server process (`postgres-holder.ts`) that claims one key on a
// Postgres store and runs on, which a test SIGKILLs as a crash would, or leaves running.

import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { RecordId } from 'mcp-request-idempotency';

const HOLDER = join(import.meta.dirname, 'postgres-holder.ts');

/**
 * Starts a holder of `id` at `url` (tables under `tablePrefix`, already migrated) with `leaseMs`;
 * resolves once it has claimed, with its store's liveness lock. The caller kills it.
 */
export async function startHolder(
  url: string,
  tablePrefix: string,
  id: RecordId,
  leaseMs: number,
): Promise<{ child: ChildProcess; lock: string }> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', HOLDER, url, tablePrefix, id.scope, id.idempotencyKey, String(leaseMs)],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    const stdout = child.stdout;
    if (!stdout) throw new Error('no stdout from the holder');
    const line = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the holder did not claim within 20 s')), 20_000);
      createInterface({ input: stdout }).once('line', (text) => {
        clearTimeout(timer);
        resolve(text);
      });
      child.once('exit', (code) => reject(new Error(`the holder exited with ${code}`)));
    });
    const answer: unknown = JSON.parse(line);
    const state = typeof answer === 'object' && answer !== null ? Reflect.get(answer, 'state') : undefined;
    const lock = typeof answer === 'object' && answer !== null ? Reflect.get(answer, 'lock') : undefined;
    if (state !== 'claimed' || typeof lock !== 'string') throw new Error(`the holder answered ${line}`);
    return { child, lock };
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
}
