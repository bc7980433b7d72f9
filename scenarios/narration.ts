// --- How the demo tells its story and keeps score ---
//
// Every scenario narrates with `say` and `heading`, and records what it set out to show with
// `expect`; `client-demo.ts` prints the table of every expectation at the end and exits non-zero
// if any failed. The scenarios read the server's answers through `textOf` and `errorFrom`.

import type { CallToolResult } from '@modelcontextprotocol/client';
import type { Attempt } from 'mcp-request-idempotency/client';

interface Expectation {
  scenario: string;
  expectation: string;
  passed: boolean;
  observed: string;
}

const expectations: Expectation[] = [];

export function say(line = ''): void {
  process.stdout.write(`${line}\n`);
}

export function heading(title: string, why: string): void {
  say();
  say(`== ${title}`);
  say(`   ${why}`);
}

/** Records one expectation of `scenario`, and says at once whether it held and what was seen. */
export function expect(scenario: string, expectation: string, passed: boolean, observed: string): void {
  expectations.push({ scenario, expectation, passed, observed });
  say(`  ${passed ? '✓' : '✗'} ${expectation} (${observed})`);
}

/** One line per attempt of a retried call: when it was sent, and what came of it. */
export function sayAttempt(a: Attempt): void {
  say(`  attempt ${a.attempt} at ${Math.round(a.elapsedMs)} ms: ${a.outcome}`);
}

export function printTable(): void {
  say();
  say('== Expectations');
  const width = Math.max(...expectations.map((e) => e.scenario.length));
  for (const e of expectations)
    say(`  ${e.passed ? '✓' : '✗'}  ${e.scenario.padEnd(width)}  ${e.expectation}`);
  const failed = expectations.filter((e) => !e.passed).length;
  // Since this process began: the whole demo, its servers' start-ups included.
  const took = `in ${Math.round(performance.now() / 1000)} s`;
  say();
  say(
    failed === 0
      ? `All ${expectations.length} expectations held, ${took}.`
      : `${failed} of ${expectations.length} expectations FAILED, ${took}.`,
  );
}

/** Whether the demo passed: something was expected, and all of it held. */
export function everyExpectationHeld(): boolean {
  return expectations.length > 0 && expectations.every((e) => e.passed);
}

export function textOf(result: CallToolResult): string {
  return result.content.map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join(' ');
}

/** Runs `call` and returns what it threw (or undefined), for scenarios that expect an error. */
export async function errorFrom(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
    return undefined;
  } catch (error) {
    return error;
  }
}
