// --- The path of one keyed call: which of the project's files it runs through ---
//
// What a reader follows from `server.ts` to the store and back, measured rather than guessed: the
// demo server over stdio with the memory store, as `npm start` runs it, with V8 counting every
// function call (coverage-probe.ts). One keyed `charge_guarded` and its replay are measured, after
// a warm-up key executed and replayed, so what runs once per process is left out. A file is on
// the path if any of its functions ran; its lines are those of the functions that ran, each
// counted once however they nest.
//
//   npx tsx test/support/call-path.ts    prints the path, file by file

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { waitUntil } from '../../demo/processes/bounds.js';
import { ROOT } from '../../demo/processes/launch.js';
import { COVERAGE_EVENT, type CoverageLine, type RanFunction } from './coverage-probe.js';
import { RawStdioPeer } from './raw-stdio.js';

export interface PathFile {
  file: string;
  functions: RanFunction[];
  /** Lines of the functions that ran, each line counted once. */
  bodyLines: number;
}

/** The files one keyed call and its replay ran through, in the repository's order. */
export async function measureKeyedCallPath(): Promise<PathFile[]> {
  const probe = join(ROOT, 'test', 'support', 'coverage-probe.ts');
  const peer = RawStdioPeer.startModern([], ['--enable-source-maps', '--import', pathToFileURL(probe).href]);
  const reports = () => peer.stderrLines.filter((line) => line.startsWith(`{"event":"${COVERAGE_EVENT}"`));
  const take = async (): Promise<CoverageLine> => {
    const before = reports().length;
    if (peer.pid === undefined) throw new Error('the server did not start');
    process.kill(peer.pid, 'SIGUSR2');
    await waitUntil(async () => reports().length > before);
    return JSON.parse(reports()[before] ?? '');
  };
  const call = async (idempotencyKey: string) => {
    const answer = await peer.request('tools/call', {
      name: 'charge_guarded',
      arguments: { amount: 5 },
      idempotencyKey,
    });
    if (!('result' in answer.message)) throw new Error(`the keyed call failed: ${answer.line}`);
  };
  try {
    await call('warm-up');
    await call('warm-up');
    await take();
    await call('measured');
    await call('measured');
    const { files } = await take();
    return Object.entries(files)
      .map(([file, functions]) => ({ file, functions, bodyLines: linesOf(functions) }))
      .sort((a, b) => a.file.localeCompare(b.file));
  } finally {
    await peer.stop();
  }
}

function linesOf(functions: readonly RanFunction[]): number {
  const lines = new Set<number>();
  for (const {
    lines: [first, last],
  } of functions)
    for (let line = first; line <= last; line++) lines.add(line);
  return lines.size;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const path = await measureKeyedCallPath();
  for (const { file, functions, bodyLines } of path) {
    const names = functions.map((fn) => `${fn.name} ×${fn.calls}`).join(', ');
    process.stdout.write(`${file.padEnd(48)} ${String(bodyLines).padStart(4)} lines  ${names}\n`);
  }
  const total = path.reduce((sum, { bodyLines }) => sum + bodyLines, 0);
  process.stdout.write(`${path.length} files, ${total} lines of the functions that ran\n`);
}
