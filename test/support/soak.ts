// `npm run soak -- <test file> [runs] [hogs]`: runs one test file again and again beside CPU-bound
// processes, and counts what failed. A race between two pipes, or a bound the test is not about,
// shows up here as a test that fails some of the time; a test that waits for the event it asserts
// on passes every run. Defaults: 10 runs beside 2 hogs (one per core of the 2-core VMs CI runs on).

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [file, runsArg = '10', hogsArg = '2'] = process.argv.slice(2);
if (file === undefined || !/^\d+$/.test(runsArg) || !/^\d+$/.test(hogsArg)) {
  process.stderr.write('usage: npm run soak -- <test file> [runs (10)] [hogs (2)]\n');
  process.exit(2);
}
const runs = Number(runsArg);

/** One CPU-bound process: a busy loop that never yields. */
const hog = (): ChildProcess => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
const hogs = Array.from({ length: Number(hogsArg) }, hog);
const stopHogs = () => {
  for (const h of hogs) h.kill('SIGKILL');
};
process.once('exit', stopHogs);

interface Report {
  testResults: Array<{ assertionResults: Array<{ fullName: string; status: string }> }>;
}

/** Runs the file once; answers the names of the tests that failed (the file itself, if it did not report). */
function runOnce(out: string): Promise<string[]> {
  return new Promise((resolve) => {
    const child = spawn(
      'npx',
      ['vitest', 'run', file as string, '--reporter=json', `--outputFile.json=${out}`, '--reporter=dot'],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    child.once('exit', () => {
      try {
        const report = JSON.parse(readFileSync(out, 'utf8')) as Report;
        resolve(
          report.testResults.flatMap((f) =>
            f.assertionResults.filter((t) => t.status === 'failed').map((t) => t.fullName),
          ),
        );
      } catch {
        resolve([`${file} (no report: the run itself failed)`]);
      }
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'soak-'));
const failures = new Map<string, number>();
let failedRuns = 0;
for (let run = 1; run <= runs; run++) {
  const started = performance.now();
  const failed = await runOnce(join(dir, `run-${run}.json`));
  for (const name of failed) failures.set(name, (failures.get(name) ?? 0) + 1);
  if (failed.length > 0) failedRuns++;
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  process.stdout.write(
    `run ${run}/${runs}: ${failed.length === 0 ? 'passed' : `${failed.length} failed`} (${seconds} s)\n`,
  );
}
rmSync(dir, { recursive: true, force: true });
stopHogs();
process.stdout.write(
  `\n${file}: ${failedRuns} of ${runs} runs failed beside ${hogs.length} CPU-bound process${hogs.length === 1 ? '' : 'es'}\n`,
);
for (const [name, count] of failures) process.stdout.write(`  ${count}× ${name}\n`);
process.exit(failedRuns === 0 ? 0 : 1);
