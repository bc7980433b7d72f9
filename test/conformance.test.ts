// A peer test suite the project did not write: @modelcontextprotocol/conformance (0.1.13, the
// last release that starts on Node 20) against the stateless HTTP server, for the scenarios
// that apply to a server with these tools.

import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HttpInstance, startHttpInstance } from './support/http.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CLI = join(ROOT, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const run = promisify(execFile);

const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'dns-rebinding-protection'];

describe('the MCP conformance suite against stateless HTTP', () => {
  let server: HttpInstance;
  beforeAll(async () => {
    server = await startHttpInstance();
  });
  afterAll(async () => {
    await server.stop();
  });

  it.each(SCENARIOS)('passes %s', async (scenario) => {
    const { stdout } = await run(
      process.execPath,
      [CLI, 'server', '--url', server.url.href, '--scenario', scenario],
      {
        cwd: ROOT,
        timeout: 60_000,
      },
    );
    expect(stdout).toMatch(/Passed: (\d+)\/\1, 0 failed/);
  });
});
