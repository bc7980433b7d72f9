// --- The backends of the later scenarios: a failure is never a skip ---
//
// A backend that is installed but does not start fails the demo with its own error: reported as
// "not installed", a broken machine would pass. One that is not installed is a one-line skip for
// a reader, and a failure where every scenario must run (CI=true, or `--scale` for Redis): CI
// reads only the exit code, and a skip there would drop expectations without a word.

import { expect, heading, say } from './narration.js';

export const REDIS_ABSENT =
  'no redis-server is installed and REDIS_URL is unset. `apt-get install redis-server` enables them';
export const POSTGRES_ABSENT =
  'no PostgreSQL server binaries are installed and DATABASE_URL is unset. `apt-get install postgresql` enables them';

/** Where the demo's records live in a Redis it shares: flushed when its scenarios are done. */
export const DEMO_REDIS_PREFIX = 'sep3182:demo:';

/** Whether a missing backend fails the demo rather than skip its scenarios. */
export const everyScenarioMustRun = (): boolean => process.env.CI === 'true';

/**
 * `start()`'s backend for `scenarios`, or undefined when they cannot run: not installed (`start`
 * resolves undefined), said on one line; or failed to start, a failed expectation with the error.
 */
export async function backendFor<T>(
  scenarios: string,
  start: () => Promise<T | undefined>,
  absent: string,
  required = everyScenarioMustRun(),
): Promise<T | undefined> {
  let backend: T | undefined;
  // A private server can take seconds to start: say what the demo is waiting for.
  say();
  say(`${scenarios}: looking for their backend, or starting a private one…`);
  try {
    backend = await start();
  } catch (error) {
    heading(`${scenarios}: not run`, 'Their backend is installed, and did not start:');
    const message = (error instanceof Error ? error.message : String(error)).trimEnd();
    say(message.replace(/^/gm, '     '));
    expect(scenarios, 'the backend they need started', false, message.split('\n')[0] ?? '');
    return undefined;
  }
  if (backend === undefined) skipped(scenarios, absent, required);
  return backend;
}

/** `scenarios` cannot run, for want of what `absent` names: one line, or a failure where all must run. */
export function skipped(scenarios: string, absent: string, required = everyScenarioMustRun()): void {
  say();
  say(`== ${scenarios}: skipped, ${absent}.`);
  if (required) expect(scenarios, 'ran (every scenario must run here)', false, 'skipped');
}
