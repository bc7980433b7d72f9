// The Vercel AI SDK (`ai` 7, `@ai-sdk/mcp` 2) against the demo's guarded server, its model scripted
// with the SDK's MockLanguageModelV4 (support/ai-sdk-agent.ts, run on Node 24: the SDK's current
// release needs Node 22). Its MCP client retries a tools/call whose answer was lost: without
// mcp-request-idempotency/ai-sdk and with it, executions counted on the ledger, every attempt's
// key read off the wire. And two turns the user means, differing only in an attached file: two
// keys, two charges.

import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { AGENT_RUN_TIMEOUT_MS } from '../../../demo/processes/bounds.js';
import type { FaultProxy } from '../../support/fault-proxy.js';
import { runAgentProcess } from '../support/agent-process.js';
import {
  agentTestBed,
  expectOneKeyOneCharge,
  expectTwoKeysTwoCharges,
  expectTwoUnkeyedCharges,
} from '../support/agents.js';
import type { AiSdkResult, AiSdkRun } from '../support/ai-sdk-agent.js';

const bed = agentTestBed({ node24: true });
const runAiSdk = (run: AiSdkRun) => runAgentProcess<AiSdkResult>(bed.node24(), 'ai-sdk-agent.ts', run);

/** `chat-1`'s turn, run `runs` times through `proxy`, each run attaching its invoice where given. */
const chatThrough = (proxy: FaultProxy, turns: Pick<AiSdkRun, 'keyed' | 'runs' | 'invoices'>) =>
  runAiSdk({ endpoint: { url: proxy.url.href }, thread: 'chat-1', ...turns });

describe('the MCP client retries a tools/call answered 502 after the server ran it (maxRetries: 2)', () => {
  it(
    'without the adapter, the retry executes the charge again: two charges',
    async () => {
      const proxy = await bed.proxy('badGateway');
      const { answers } = await chatThrough(proxy, { keyed: false, runs: 1 });
      await expectTwoUnkeyedCharges(bed, proxy);
      expect(answers.join()).toContain('New balance: 200');
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'with it, both attempts carry one key and the retry gets the stored answer: one charge',
    async () => {
      const proxy = await bed.proxy('badGateway');
      const { answers, warnings } = await chatThrough(proxy, { keyed: true, runs: 1 });
      await expectOneKeyOneCharge(bed, proxy);
      expect(answers.join()).toContain('New balance: 100');
      expect(warnings).toStrictEqual([]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});

describe('over stdio, through the wrapped transport', () => {
  it(
    'a turn run again with the same conversation replays its charge: one charge, one key',
    async () => {
      const { answers, sentKeys, balance } = await runAiSdk({
        endpoint: { stdio: true },
        keyed: true,
        thread: 'chat-1',
        runs: 2,
      });
      expect(balance).toBe(100);
      expect(sentKeys).toHaveLength(2);
      expect(new Set(sentKeys).size).toBe(1);
      expect(checkIdempotencyKey(sentKeys[0]).ok).toBe(true);
      expect(answers).toHaveLength(2);
      expect(answers[1]).toBe(answers[0]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});

describe('two turns of one chat that differ only in their attached invoice, an ArrayBuffer', () => {
  it(
    'without the adapter, both charges execute: 200',
    async () => {
      const proxy = await bed.proxy();
      await chatThrough(proxy, { keyed: false, runs: 2, invoices: ['Invoice 1: 100', 'Invoice 2: 100'] });
      await expectTwoUnkeyedCharges(bed, proxy);
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'get a key each: both charges execute, 200, not the second answered with the first’s result',
    async () => {
      const proxy = await bed.proxy();
      const { answers, warnings } = await chatThrough(proxy, {
        keyed: true,
        runs: 2,
        invoices: ['Invoice 1: 100', 'Invoice 2: 100'],
      });
      await expectTwoKeysTwoCharges(bed, proxy);
      expect(answers.join()).toContain('New balance: 200');
      expect(warnings).toStrictEqual([]);
    },
    AGENT_RUN_TIMEOUT_MS,
  );

  it(
    'the same turn, the same invoice, sent again: one key, one charge',
    async () => {
      const proxy = await bed.proxy();
      await chatThrough(proxy, { keyed: true, runs: 2, invoices: ['Invoice 1: 100', 'Invoice 1: 100'] });
      await expectOneKeyOneCharge(bed, proxy);
    },
    AGENT_RUN_TIMEOUT_MS,
  );
});
