// Mastra (`@mastra/core` 1.71, `@mastra/mcp` 2) against the demo's guarded server over Streamable
// HTTP, its model scripted with Mastra's own test model (support/mastra-agent.ts, run on Node 24:
// Mastra's current release needs Node 22.13). Its MCPClient reconnects and sends a tools/call
// again when the connection dropped: without mcp-request-idempotency/mastra and with it,
// executions counted on the ledger, every attempt's key read off the wire.

import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { AGENT_RUN_TIMEOUT_MS } from '../../../demo/processes/bounds.js';
import { runAgentProcess } from '../support/agent-process.js';
import { agentTestBed, chargeKeys } from '../support/agents.js';
import type { MastraResult, MastraRun } from '../support/mastra-agent.js';

const bed = agentTestBed({ node24: true });
const runMastra = (run: MastraRun) => runAgentProcess<MastraResult>(bed.node24(), 'mastra-agent.ts', run);

describe('MCPClient reconnects and sends the tools/call again when the connection dropped after the server ran it', () => {
  it(
    'without the adapter, the resent call executes the charge again: two charges',
    async () => {
      const proxy = await bed.proxy('reset');
      await runMastra({ url: proxy.url.href, keyed: false });
      expect(await bed.balance()).toBe(200);
      expect(proxy.calls.map((c) => c.answered)).toStrictEqual(['reset', 'forwarded']);
      expect(chargeKeys(proxy)).toStrictEqual([undefined, undefined]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'with it, both sends carry one key and the second gets the stored answer: one charge',
    async () => {
      const proxy = await bed.proxy('reset');
      const { text, warnings } = await runMastra({ url: proxy.url.href, keyed: true });
      expect(await bed.balance()).toBe(100);
      const [key, resent] = chargeKeys(proxy);
      expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
      expect(resent).toBe(key);
      expect(text).toBe('Charged 100.');
      expect(warnings).toStrictEqual([]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});
