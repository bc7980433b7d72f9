// Mastra (`@mastra/core` 1.71, `@mastra/mcp` 2) against the demo's guarded server over Streamable
// HTTP, its model scripted with Mastra's own test model (support/mastra-agent.ts, run on Node 24:
// Mastra's current release needs Node 22.13). Its MCPClient reconnects and sends a tools/call
// again when the connection dropped: without mcp-request-idempotency/mastra and with it,
// executions counted on the ledger, every attempt's key read off the wire. And two charges the
// model means, one per step, both numbered `call_0`: two keys, two charges; and a charge approved
// where its run was suspended (keyed) or by another instance (unkeyed, and said so).

import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { AGENT_RUN_TIMEOUT_MS } from '../../../demo/processes/bounds.js';
import { AgentKeyWarnings } from '../../../packages/idempotency/agents/call.js';
import { runAgentProcess } from '../support/agent-process.js';
import {
  agentTestBed,
  chargeKeys,
  expectOneKeyOneCharge,
  expectTwoKeysTwoCharges,
  expectTwoUnkeyedCharges,
} from '../support/agents.js';
import type { MastraResult, MastraRun } from '../support/mastra-agent.js';

const bed = agentTestBed({ node24: true });
const runMastra = (run: MastraRun) => runAgentProcess<MastraResult>(bed.node24(), 'mastra-agent.ts', run);

describe('MCPClient reconnects and sends the tools/call again when the connection dropped after the server ran it', () => {
  it(
    'without the adapter, the resent call executes the charge again: two charges',
    async () => {
      const proxy = await bed.proxy('reset');
      await runMastra({ url: proxy.url.href, keyed: false });
      await expectTwoUnkeyedCharges(bed, proxy);
      expect(proxy.calls.map((c) => c.answered)).toStrictEqual(['reset', 'forwarded']);
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'with it, both sends carry one key and the second gets the stored answer: one charge',
    async () => {
      const proxy = await bed.proxy('reset');
      const { text, warnings } = await runMastra({ url: proxy.url.href, keyed: true });
      await expectOneKeyOneCharge(bed, proxy);
      expect(text).toBe('Charged 100.');
      expect(warnings).toStrictEqual([]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});

describe('a model that charges in one step and, having seen the result, again in the next, both calls numbered call_0', () => {
  it(
    'without the adapter, both charges execute: 200',
    async () => {
      const proxy = await bed.proxy();
      await runMastra({ url: proxy.url.href, keyed: false, chargesInTwoSteps: true });
      await expectTwoUnkeyedCharges(bed, proxy);
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'with it, the two responses give two keys and both charges execute: 200, not the first replayed',
    async () => {
      const proxy = await bed.proxy();
      const { warnings } = await runMastra({ url: proxy.url.href, keyed: true, chargesInTwoSteps: true });
      await expectTwoKeysTwoCharges(bed, proxy);
      expect(warnings).toStrictEqual([]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});

describe('a charge that waits for approval (requireToolApproval), then runs', () => {
  it(
    'approved by the agent that suspended the run: the call carries the key of its step',
    async () => {
      const proxy = await bed.proxy();
      const { warnings } = await runMastra({ url: proxy.url.href, keyed: true, approved: 'here' });
      expect(await bed.balance()).toBe(100);
      const [key] = chargeKeys(proxy);
      expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
      expect(warnings).toStrictEqual([]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'approved by another instance, whose processor never saw the step: no key, and the program is told',
    async () => {
      const proxy = await bed.proxy();
      const { warnings } = await runMastra({ url: proxy.url.href, keyed: true, approved: 'elsewhere' });
      expect(await bed.balance()).toBe(100);
      expect(chargeKeys(proxy)).toStrictEqual([undefined]);
      expect(warnings).toStrictEqual([AgentKeyWarnings.stepUnseen('payments_charge_guarded')]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});
