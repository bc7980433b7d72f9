// The checker's front door: what its README promises (options, severities, exit statuses) is what
// it does, and a run that checked nothing that matters never exits 0, however it came to that.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { freePort } from '../../demo/processes/launch.js';
import { RULES } from '../../packages/checker/rules.js';
import { ROOT, runChecker, stdioServer } from '../fixtures/checker/harness.js';

const README = readFileSync(join(ROOT, 'packages', 'checker', 'README.md'), 'utf8');

/** The rows of the README table whose header row starts with `| first |`, as cells. */
function tableRows(first: string): string[][] {
  const lines = README.split('\n');
  const start = lines.findIndex((line) => line.startsWith(`| ${first} |`));
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .split(/(?<!\\)\|/)
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
  }
  return rows;
}

const optionsIn = (text: string) => [...new Set(text.match(/--[a-z][a-z-]+/g) ?? [])].sort();

describe("the checker's README says what it does", () => {
  test('its option table names every option --help lists, and no other', async () => {
    const help = await runChecker(['--help'], false);
    expect(help.code).toBe(0);
    const documented = optionsIn(
      tableRows('option')
        .map(([option = '']) => option)
        .join(' '),
    );
    const usageLines = help.stdout.split('\n').filter((line) => /^ {2}--/.test(line));
    expect(documented).toEqual(optionsIn(usageLines.map((line) => line.trim().split(/\s/)[0]).join(' ')));
    expect(documented).toContain('--timeout-ms');
  });

  test('each rule whose severity is not its sentence’s keyword is one the README names, and why', () => {
    const keyword = (sentence: string) =>
      /\bMUST\b/.test(sentence) ? 'failure' : /\bSHOULD\b/.test(sentence) ? 'warning' : 'note';
    const own = RULES.filter((rule) => rule.severity !== keyword(rule.sentence)).map((rule) => rule.id);
    const paragraph = README.slice(README.indexOf('Every check has an id and a severity'));
    const quoted = paragraph.slice(0, paragraph.indexOf('\n\n')).match(/`[a-z.-]+`/g) ?? [];
    const named = quoted.map((code) => code.slice(1, -1)).filter((code) => RULES.some((r) => r.id === code));
    expect(named.sort()).toEqual(own.sort());
  });

  test('its exit status table lists the five statuses the checker returns', () => {
    expect(tableRows('exit status').map(([status]) => status)).toEqual(['0', '1', '2', '3', '4']);
  });
});

const correct = () => stdioServer('test/fixtures/checker/flawed.ts', 'correct');

describe('a run that checked nothing that matters exits 4, saying why and what to pass', () => {
  test.each([
    { tool: 'fail', why: /two calls without a key gave isError "Unavailable", then isError "Unavailable"/ },
    // A tool that answers, but nothing in its answer counts executions.
    {
      tool: 'constant',
      why: /two calls without a key gave "ok", then "ok": no number in them counts executions/,
    },
  ])(
    '--tool $tool',
    async ({ tool, why }) => {
      const run = await runChecker([...correct(), '--tool', tool, '--arguments', '{"amount":1}'], false);
      expect(run.stdout).toMatch(why);
      expect(run.stdout).toMatch(
        /^Nothing certain about deduplication: \d+ rules that rest on it could not be observed \(new-key\.executes, key\.opaque, .*replay\.not-executed, .*\); new-key\.executes: .*\. Pass a --tool and --arguments whose call succeeds/m,
      );
      expect(run.stdout).toMatch(/^0 failed \(MUST\)/m);
      expect(run.code).toBe(4);
    },
    60_000,
  );
});

describe('the other exit statuses', () => {
  test('2 for a bad command line, with the usage on stderr', async () => {
    const run = await runChecker([...correct(), '--tool', 'charge', '--timeout-ms', '0']);
    expect(run.stderr).toMatch(/^error: --timeout-ms must be a positive integer, got "0"\nUsage: /);
    expect(run.code).toBe(2);
  });

  test('3 for a server that cannot be reached, with the cause and what to do', async () => {
    // A loopback port nothing listens on: the connection is refused at once.
    const port = await freePort();
    const run = await runChecker(['--url', `http://127.0.0.1:${port}/mcp`, '--tool', 'charge']);
    expect(run.stderr).toBe(
      `could not check HTTP: http://127.0.0.1:${port}/mcp: fetch failed (ECONNREFUSED): is the server ` +
        `running and listening at http://127.0.0.1:${port}/mcp? Start it first, or correct --url\n`,
    );
    expect(run.code).toBe(3);
  });

  test('3 for a host that does not resolve, saying so', async () => {
    // `.invalid` never resolves (RFC 6761): the lookup fails without reaching any host.
    const run = await runChecker(['--url', 'http://checker-test.invalid/mcp', '--tool', 'charge']);
    expect(run.stderr).toMatch(
      /: fetch failed \((ENOTFOUND|EAI_AGAIN)\): no such host; check the host in --url /,
    );
    expect(run.code).toBe(3);
  });

  test.each([
    [
      'node',
      'no-such-server.js',
      /: the server exited \(1\): Error: Cannot find module '.*no-such-server\.js'\n$/,
    ],
    [
      'node --import tsx',
      'no-such-server.ts',
      /: the server exited \(1\): Error \[ERR_MODULE_NOT_FOUND\]: Cannot find module '.*no-such-server\.ts'/,
    ],
    [
      'python3 -c',
      '"import no_such_server"',
      /: the server exited \(1\): ModuleNotFoundError: No module named 'no_such_server'\n$/,
    ],
  ])(
    '3 for a server that cannot start (%s %s), with the error line its runtime printed',
    async (runtime, file, said) => {
      const run = await runChecker(['--command', `${runtime} ${file}`, '--tool', 'x']);
      expect(run.stderr).toMatch(said);
      expect(run.code).toBe(3);
    },
  );

  test('3 for a server that never answers, naming the request it did not answer', async () => {
    const run = await runChecker([
      '--command',
      'node -e setInterval(()=>{},1000)',
      '--tool',
      'x',
      '--timeout-ms',
      '500',
    ]);
    expect(run.stderr).toMatch(
      /: no answer to request \d+ \((server\/discover|initialize)\) within 500 ms\n$/,
    );
    expect(run.code).toBe(3);
  });
});

describe('a tool the server does not have', () => {
  test('is refused before any call, with the tools the server lists', async () => {
    const run = await runChecker([...correct(), '--tool', 'chrage', '--arguments', '{"amount":1}']);
    expect(run.stderr).toMatch(/^error: --tool chrage: the server lists no such tool; its tools: \S/);
    expect(run.stderr).toContain('charge');
    expect(run.code).toBe(2);
  });
});
