// --- Scenario 18, and test/interop/ where its framework is installed ---
//
// What the project tests against but did not write (the agent frameworks, the MCP Inspector, the
// conformance suite) is installed apart from the demo's own packages, so that `npm ci` stays
// light. The full tour installs it before its first scenario, saying so, as `npm test` does: when
// it is missing, or older than its lockfile (the rule of package.json's `interop:install`).

import { spawn } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../processes/launch.js';
import { say } from './narration.js';

const INTEROP = join(ROOT, 'test', 'interop');

/** When a file was last written, or 0 if it is missing. */
function writtenAt(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

/** Whether `npm run interop:install` would install: what npm ci last installed predates the lockfile. */
function interopNeedsInstall(): boolean {
  const installed = writtenAt(join(INTEROP, 'node_modules', '.package-lock.json'));
  return installed <= writtenAt(join(INTEROP, 'package-lock.json'));
}

/** Runs `npm run interop:install`, npm's own output shown; rejects if it fails. */
function installInterop(): Promise<void> {
  return new Promise((resolve, reject) => {
    const npm = spawn('npm', ['run', '-s', 'interop:install'], { cwd: ROOT, stdio: 'inherit' });
    npm.once('error', reject);
    npm.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`npm run interop:install exited with ${code}`)),
    );
  });
}

/**
 * Installs test/interop/ if it needs it, saying what while npm runs; answers how long that took,
 * in words for the closing line, or undefined when nothing was installed.
 */
export async function installInteropIfNeeded(): Promise<string | undefined> {
  if (!interopNeedsInstall()) return undefined;
  say(
    'Installing test/interop/ first (npm ci; once, until its lockfile changes): LangChain for scenario 18,',
  );
  say('  and the AI SDK, Mastra, the MCP Inspector and the conformance suite the tests run…');
  const began = performance.now();
  await installInterop();
  const seconds = Math.round((performance.now() - began) / 1000);
  say(`…installed in ${seconds} s.`);
  return `${seconds} s of it installing test/interop/`;
}

/** Scenario 18, from test/interop/, where it is type-checked: a path, so the root's check does not follow it. */
export async function runAgentFrameworkScenario(): Promise<void> {
  const scenario18 = new URL('../../test/interop/agent-framework-retries.ts', import.meta.url).href;
  const { agentFrameworkRetries }: { agentFrameworkRetries: () => Promise<void> } = await import(scenario18);
  await agentFrameworkRetries();
}
