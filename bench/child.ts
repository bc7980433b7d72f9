// --- Parts of the benchmark that need a process of their own ---
//
// Memory is measured after `global.gc()`, which needs `--expose-gc`, and in a process that
// holds nothing else; the scaling rows hold a million records, which must not slow down the
// rows measured after them. Each such part runs as `node <flags> --import tsx <file>` and
// prints its result as one JSON line, prefixed so stray output cannot be mistaken for it.

import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { z } from 'zod';

const HERE = dirname(fileURLToPath(import.meta.url));
const RESULT_PREFIX = 'BENCH-RESULT ';

/** Prints the child's result for `runChild` to read. */
export function reportResult(result: unknown): void {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
}

export async function runChild<T extends z.ZodType>(
  file: string,
  args: string[],
  nodeFlags: string[],
  schema: T,
  progress: (line: string) => void,
): Promise<z.infer<T>> {
  const child = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', join(HERE, file), ...args], {
    cwd: join(HERE, '..'),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // Killed with the benchmark, however the benchmark ends.
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  let partial = '';
  let result: string | undefined;
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (line.startsWith(RESULT_PREFIX)) result = line.slice(RESULT_PREFIX.length);
      else if (line) progress(line);
    }
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-8_000);
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  process.off('exit', kill);
  if (code !== 0 || result === undefined) throw new Error(`${file} failed (exit ${code}):\n${stderr}`);
  return schema.parse(JSON.parse(result));
}
