// LangChain.js (`langchain` createAgent, `@langchain/mcp-adapters`) against the demo's guarded
// server, its model scripted with LangChain's own fake chat model. Each way the framework runs a
// tool call again after the tool ran, without mcp-request-idempotency/langchain and with it:
// executions counted on the ledger, every attempt's key read off the wire.

import { Command, interrupt, MemorySaver } from '@langchain/langgraph';
import { createMiddleware, toolRetryMiddleware } from 'langchain';
import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { startHttpInstance } from '../../../demo/processes/launch.js';
import { MemoryLedger } from '../../../ledger.js';
import { startFaultProxy } from '../../support/fault-proxy.js';
import { startBareHttpServer } from '../../support/http.js';
import { balanceThrough, connectLangChainAgent, type Endpoint } from '../langchain-agent.js';
import {
  agentTestBed,
  CHARGE_TOOL,
  chargeKeys,
  expectOneKeyOneCharge,
  expectTwoUnkeyedCharges,
} from '../support/agents.js';

const bed = agentTestBed();

const prompt = { messages: [{ role: 'user', content: 'Charge 100.' }] };

/**
 * One run of the agent with `toolRetryMiddleware` (its defaults: two retries of any error, here
 * with a short first wait), against `url`; what the charge answered the model.
 */
async function runWithRetries(url: URL, keyed: boolean, onWarning?: (message: string) => void) {
  const { agent, close } = await connectLangChainAgent({
    endpoint: { url },
    keyed,
    middleware: [toolRetryMiddleware({ initialDelayMs: 10 })],
    onWarning,
  });
  try {
    const { messages } = await agent.invoke(prompt);
    return JSON.stringify(messages.find((m: { type: string }) => m.type === 'tool')?.content);
  } finally {
    await close();
  }
}

describe('toolRetryMiddleware runs a tool call again when its answer was lost (a 502 after the tool ran)', () => {
  it('without the adapter, the retry executes the charge again: two charges', async () => {
    const proxy = await bed.proxy('badGateway');
    await runWithRetries(proxy.url, false);
    await expectTwoUnkeyedCharges(bed, proxy);
    expect(proxy.calls.map((c) => c.answered)).toStrictEqual(['badGateway', 'forwarded']);
  });

  it('with it, both attempts carry one key and the retry gets the stored answer: one charge', async () => {
    const proxy = await bed.proxy('badGateway');
    const answer = await runWithRetries(proxy.url, true);
    await expectOneKeyOneCharge(bed, proxy);
    expect(answer).toContain('Charged 100. New balance: 100');
  });
});

describe('the retry middleware turned on with the adapter in: a retry that meets the charge still running', () => {
  it('is answered in progress, nothing starting twice, and retried until it gets the stored answer', async () => {
    // The charge takes 800 ms; the agent gives up on each attempt after 200 ms and retries with
    // waits (200 ms, doubling) that add up to far more than the charge.
    const slow = await startHttpInstance(['--charge-latency-ms', '800']);
    const { agent, close } = await connectLangChainAgent({
      endpoint: { url: slow.url },
      keyed: true,
      toolTimeoutMs: 200,
      middleware: [toolRetryMiddleware({ initialDelayMs: 200, maxRetries: 6, onFailure: 'error' })],
    });
    try {
      await agent.invoke(prompt);
    } finally {
      await close();
      await slow.stop(5_000);
    }
    const decided = (await slow.decisions()).map((d) => d.decision);
    expect(decided).toContain('inProgress');
    expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
    expect(decided.at(-1)).toBe('replayed');
    expect(new Set((await slow.decisions()).map((d) => d.idempotencyKey)).size).toBe(1);
  });
});

/** A middleware that, once the tool has answered, asks a person to look at the result. */
const reviewAfterTool = () =>
  createMiddleware({
    name: 'ReviewAfterTool',
    wrapToolCall: async (request, handler) => {
      const result = await handler(request);
      interrupt({ review: request.toolCall.name });
      return result;
    },
  });

/**
 * Runs the agent until the review interrupts it, resumes it, then replays the run from the
 * checkpoint before its tools ran; the ledger's balance after each of the three.
 */
async function interruptResumeReplay(endpoint: Endpoint, keyed: boolean, thread: string) {
  const { agent, client, stderrLines, close } = await connectLangChainAgent({
    endpoint,
    keyed,
    middleware: [reviewAfterTool()],
    checkpointer: new MemorySaver(),
  });
  const config = { configurable: { thread_id: thread } };
  const balances: number[] = [];
  const balance = async () => balances.push(await balanceThrough(client));
  try {
    await agent.invoke(prompt, config);
    await balance();
    await agent.invoke(new Command({ resume: 'looks right' }), config);
    await balance();
    for await (const snapshot of agent.graph.getStateHistory(config)) {
      if (!snapshot.next.includes('tools')) continue;
      await agent.invoke(null, snapshot.config);
      break;
    }
    await balance();
  } finally {
    await close();
  }
  return { balances, stderrLines };
}

describe('a run interrupted after the tool ran, resumed, then replayed from the checkpoint before it', () => {
  it('without the adapter, the resume and the replay each execute the charge again: three charges', async () => {
    const proxy = await bed.proxy();
    const { balances } = await interruptResumeReplay({ url: proxy.url }, false, 'thread-1');
    expect(balances).toStrictEqual([100, 200, 300]);
    expect(chargeKeys(proxy)).toStrictEqual([undefined, undefined, undefined]);
  });

  it('with it, all three carry one key: one charge, and the resume and the replay get its answer', async () => {
    const proxy = await bed.proxy();
    const { balances } = await interruptResumeReplay({ url: proxy.url }, true, 'thread-1');
    expect(balances).toStrictEqual([100, 100, 100]);
    const keys = chargeKeys(proxy);
    expect(keys).toHaveLength(3);
    expect(new Set(keys).size).toBe(1);
    expect(checkIdempotencyKey(keys[0]).ok).toBe(true);
  });

  it('over stdio too: the transport wrapper keys the calls, one charge', async () => {
    const { balances, stderrLines } = await interruptResumeReplay({ stdio: [] }, true, 'thread-1');
    expect(balances).toStrictEqual([100, 100, 100]);
    const decisions = stderrLines
      .filter((line) => line.includes('"event":"idempotency"'))
      .map((line) => JSON.parse(line))
      .filter((d) => d.tool === CHARGE_TOOL);
    expect(decisions.map((d) => d.decision)).toStrictEqual(['executed', 'replayed', 'replayed']);
    expect(new Set(decisions.map((d) => d.idempotencyKey)).size).toBe(1);
  }, 60_000);
});

describe('a server that does not advertise tools.idempotency', () => {
  it('gets the calls as before, without a key (the retry executes again), and the program is told once', async () => {
    const ledger = new MemoryLedger();
    const bare = await startBareHttpServer(ledger);
    const proxy = await startFaultProxy(bare.url, { fault: 'badGateway', tool: CHARGE_TOOL });
    const warnings: string[] = [];
    try {
      await runWithRetries(proxy.url, true, (w) => warnings.push(w));
    } finally {
      await proxy.close();
      await bare.close();
    }
    expect(await ledger.balance()).toBe(200);
    expect(chargeKeys(proxy)).toStrictEqual([undefined, undefined]);
    expect(warnings).toStrictEqual([
      `The MCP server no-capability (${proxy.url.href}) does not advertise capabilities.tools.idempotency: tool calls go to it without an idempotencyKey, as before, and a retry of one may execute it again.`,
    ]);
  });
});
