// --- Which of the project's functions ran, between two signals ---
//
// Loaded into a server process after tsx (`--enable-source-maps --import tsx --import this`), it
// counts every function call with V8's precise coverage. Each SIGUSR2 takes the counts (which
// resets them) and writes one stderr line: the project's functions that ran since the last
// signal, each with its lines in the TypeScript source (through the source maps tsx hands Node).
// So a measurement is: warm up, signal (the warm-up is discarded), do what is measured, signal.
// test/support/call-path.ts reads the lines.

import { Session } from 'node:inspector/promises';
import { findSourceMap } from 'node:module';
import { relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The stderr line's marker, and what follows it. */
export const COVERAGE_EVENT = 'coverage';

export interface RanFunction {
  name: string;
  calls: number;
  /** First and last line of the function in its TypeScript source, 1-based. */
  lines: [number, number];
}

export interface CoverageLine {
  event: typeof COVERAGE_EVENT;
  /** Files relative to the repository's root, with the functions of each that ran. */
  files: Record<string, RanFunction[]>;
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });

process.on('SIGUSR2', () => {
  report().catch((error: unknown) => process.stderr.write(`coverage-probe: ${String(error)}\n`));
});

async function report(): Promise<void> {
  const { result } = await session.post('Profiler.takePreciseCoverage');
  await session.post('Debugger.enable');
  const files: CoverageLine['files'] = {};
  for (const script of result) {
    if (!script.url.startsWith('file:')) continue;
    const file = relative(ROOT, fileURLToPath(script.url)).split(sep).join('/');
    // The project's own code: not its dependencies, nor the tests' harness (this probe among it).
    if (file.startsWith('..') || file.startsWith('test/') || file.split('/').includes('node_modules'))
      continue;
    const ran = script.functions.filter((fn) => (fn.ranges[0]?.count ?? 0) > 0);
    const map = findSourceMap(script.url);
    if (ran.length === 0 || !map) continue;
    const { scriptSource } = await session.post('Debugger.getScriptSource', { scriptId: script.scriptId });
    const lineStarts = [0];
    for (let i = scriptSource.indexOf('\n'); i !== -1; i = scriptSource.indexOf('\n', i + 1))
      lineStarts.push(i + 1);
    /** The TypeScript line of a generated offset; undefined for code the compiler added. */
    const sourceLine = (offset: number): number | undefined => {
      const line = Math.max(
        0,
        lineStarts.findLastIndex((start) => start <= offset),
      );
      const entry = map.findEntry(line, offset - (lineStarts[line] ?? 0));
      return 'originalLine' in entry ? entry.originalLine + 1 : undefined;
    };
    const functions = ran.flatMap((fn): RanFunction[] => {
      const whole = fn.ranges[0];
      if (!whole) return [];
      const { startOffset, endOffset, count } = whole;
      const first = sourceLine(startOffset);
      const last = sourceLine(Math.max(startOffset, endOffset - 1));
      if (first === undefined || last === undefined || last < first) return [];
      return [{ name: fn.functionName || '(anonymous)', calls: count, lines: [first, last] }];
    });
    if (functions.length > 0) files[file] = functions;
  }
  await session.post('Debugger.disable');
  const line: CoverageLine = { event: COVERAGE_EVENT, files };
  process.stderr.write(`${JSON.stringify(line)}\n`);
}
