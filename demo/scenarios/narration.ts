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

/**
 * The closing table: every expectation (the SEP's own story, a screenful), or, for the full tour,
 * one line per scenario with its count, and under it only the expectations that failed. `setUp`
 * names what of the time was not the scenarios' (an install), if anything.
 */
export function printTable(detail: 'every expectation' | 'one line per scenario', setUp?: string): void {
  say();
  say(detail === 'every expectation' ? '== Expectations' : '== Summary: every scenario');
  const label = scenarioLabels(expectations.map((e) => e.scenario));
  const mark = (passed: boolean) => (passed ? '✓' : '✗');
  if (detail === 'every expectation') {
    for (const e of expectations) say(`  ${mark(e.passed)}  ${label(e.scenario)}  ${e.expectation}`);
  } else {
    // In the order the scenarios ran (Node 20 has no Map.groupBy).
    for (const scenario of new Set(expectations.map((e) => e.scenario))) {
      const ofIt = expectations.filter((e) => e.scenario === scenario);
      const held = ofIt.filter((e) => e.passed).length;
      say(`  ${mark(held === ofIt.length)}  ${label(scenario)}  ${held} of ${ofIt.length} held`);
      for (const e of ofIt.filter((e) => !e.passed)) say(`       ✗ ${e.expectation} (${e.observed})`);
    }
  }
  const failed = expectations.filter((e) => !e.passed).length;
  // Since this process began: the whole demo, its servers' start-ups (and any install) included.
  const took = `in ${Math.round(performance.now() / 1000)} s${setUp ? `, ${setUp}` : ''}`;
  say();
  say(
    failed === 0
      ? `All ${expectations.length} expectations held, ${took}.`
      : `${failed} of ${expectations.length} expectations FAILED, ${took}.`,
  );
}

/**
 * The table's scenario column: each scenario's number right-aligned ("9 retry" under "14 provider"
 * reads as a column of names), then the whole label padded to the widest.
 */
function scenarioLabels(scenarios: string[]): (scenario: string) => string {
  const numbered = (scenario: string) => /^(\d+) (.*)$/.exec(scenario);
  const digits = Math.max(0, ...scenarios.map((s) => numbered(s)?.[1]?.length ?? 0));
  const aligned = (scenario: string) => {
    const [, number, name] = numbered(scenario) ?? [];
    return number === undefined ? scenario : `${number.padStart(digits)} ${name}`;
  };
  const width = Math.max(...scenarios.map((s) => aligned(s).length));
  return (scenario) => aligned(scenario).padEnd(width);
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
