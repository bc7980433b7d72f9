// The key of a tool call an agent framework makes (agents/call.ts), without a framework: the key
// derived from the call's parts, the execution context that carries it to the one tools/call the
// tool call owns (or a retry of it), the warning when no wire wrapper saw that call, and the tools
// copied so each execution runs with its key.

import fc from 'fast-check';
import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import {
  AgentKeyWarnings,
  type AgentToolCall,
  agentToolCallKey,
  onceEach,
  ownedIdempotencyKey,
  runWithToolCallKey,
  withKeyedExecutions,
} from '../../../packages/idempotency/agents/call.js';

const part = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary' }),
  fc.constantFrom('', 'call_0', 'call_1', '"', '\\', ','),
);
const toolCall = fc.record({ thread: part, response: part, tool: part, toolCallId: part });
const call: AgentToolCall = { thread: 'chat-1', response: 'resp-1', tool: 'charge', toolCallId: 'call_0' };

/** Runs `run` as `call`'s execution, the warnings kept. */
async function keyed<T>(run: () => Promise<T>, c: AgentToolCall = call) {
  const warnings: string[] = [];
  const result = await runWithToolCallKey(c, run, (m) => warnings.push(m));
  return { result, warnings };
}

describe('the key of a tool call', () => {
  it("keeps the guard's key rules and its own form, whatever the provider's ids hold", () => {
    fc.assert(
      fc.property(toolCall, (c) => {
        const key = agentToolCallKey(c);
        expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
        expect(key).toMatch(/^agent-[A-Za-z0-9_-]{43}$/);
      }),
    );
  });

  it('is the same exactly when every part is: no two calls share one, however their parts split', () => {
    const split = fc.tuple(fc.string(), fc.string(), fc.string()).map(([a, b, c]) => [
      { thread: a, response: b + c, tool: 't', toolCallId: 'i' },
      { thread: a + b, response: c, tool: 't', toolCallId: 'i' },
    ]);
    fc.assert(
      fc.property(fc.oneof(fc.tuple(toolCall, toolCall), split), ([a, b]) => {
        const same =
          a.thread === b.thread &&
          a.response === b.response &&
          a.tool === b.tool &&
          a.toolCallId === b.toolCallId;
        expect(agentToolCallKey(a) === agentToolCallKey(b)).toBe(same);
      }),
    );
  });
});

describe('the tools/call a tool call owns', () => {
  it('gets no key outside any tool call', () => {
    expect(ownedIdempotencyKey('charge', { amount: 1 })).toBeUndefined();
  });

  it('is the first one sent, and its retries with equivalent arguments get the same key', async () => {
    const { result } = await keyed(async () => [
      ownedIdempotencyKey('charge', { amount: 1, currency: 'EUR' }),
      ownedIdempotencyKey('charge', { currency: 'EUR', amount: 1.0 }),
    ]);
    expect(result).toStrictEqual([agentToolCallKey(call), agentToolCallKey(call)]);
  });

  it('is the only one: another tool, or other arguments, sent while it runs go without the key', async () => {
    const { result } = await keyed(async () => [
      ownedIdempotencyKey('charge', { amount: 1 }),
      ownedIdempotencyKey('refund', { amount: 1 }),
      ownedIdempotencyKey('charge', { amount: 2 }),
    ]);
    expect(result).toStrictEqual([agentToolCallKey(call), undefined, undefined]);
  });

  it('is never one whose arguments cannot be compared: it goes without a key, and the next call may own it', async () => {
    const { result } = await keyed(async () => [
      ownedIdempotencyKey('charge', { amount: 10n }),
      ownedIdempotencyKey('charge', { amount: 1 }),
    ]);
    expect(result).toStrictEqual([undefined, agentToolCallKey(call)]);
  });

  it('is told apart in tool calls running at once: each gets its own key', async () => {
    const other = { ...call, toolCallId: 'call_1' };
    const send = async () => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      return ownedIdempotencyKey('charge', { amount: 1 });
    };
    const [a, b] = await Promise.all([keyed(send, call), keyed(send, other)]);
    expect([a.result, b.result]).toStrictEqual([agentToolCallKey(call), agentToolCallKey(other)]);
  });
});

describe('the warning that no wrapper saw the tool call', () => {
  it('is given when the tool call answered without its tools/call passing a wrapper', async () => {
    const { warnings } = await keyed(async () => 'answered');
    expect(warnings).toStrictEqual([AgentKeyWarnings.unseen('charge')]);
  });

  it('is not given once a wrapper took the key for it', async () => {
    const { warnings } = await keyed(async () => ownedIdempotencyKey('charge', {}));
    expect(warnings).toStrictEqual([]);
  });

  it('is not given for a call that failed: it may have failed before anything was sent', async () => {
    const warnings: string[] = [];
    await expect(
      runWithToolCallKey(
        call,
        async () => Promise.reject(new Error('offline')),
        (m) => warnings.push(m),
      ),
    ).rejects.toThrow('offline');
    expect(warnings).toStrictEqual([]);
  });

  it('is said once each, however many calls go unseen', () => {
    const said: string[] = [];
    const warn = onceEach((m) => said.push(m));
    for (const m of ['a', 'b', 'a', 'a', 'b', 'c']) warn(m);
    expect(said).toStrictEqual(['a', 'b', 'c']);
  });
});

describe('tools copied with keyed executions', () => {
  type Context = { toolCallId?: string; fail?: boolean };
  const callOf = (tool: string, context: Context): AgentToolCall | undefined => {
    if (context.fail) throw new Error('no messages to derive the key from');
    return context.toolCallId === undefined ? undefined : { ...call, tool, toolCallId: context.toolCallId };
  };
  let ran = 0;
  const tools = {
    charge: {
      label: 'charge',
      execute(input: { amount: number }, _context: Context) {
        ran += 1;
        return { owned: ownedIdempotencyKey('charge', input), self: this.label };
      },
    },
    manual: { description: 'run by the application', execute: undefined },
  };

  it("run each execution with its tool call's key, the tool's `this` kept, the originals untouched", async () => {
    const copy = withKeyedExecutions(tools, callOf, () => {});
    const answer = await copy.charge.execute({ amount: 1 }, { toolCallId: 'call_7' });
    expect(answer).toStrictEqual({
      owned: agentToolCallKey({ ...call, toolCallId: 'call_7' }),
      self: 'charge',
    });
    expect(copy.charge).not.toBe(tools.charge);
    expect(copy.manual).toBe(tools.manual);
  });

  it('run a call the key cannot be told for as before, unkeyed', async () => {
    const copy = withKeyedExecutions(tools, callOf, () => {});
    expect(await copy.charge.execute({ amount: 1 }, {})).toStrictEqual({ owned: undefined, self: 'charge' });
  });

  it('fail a call whose key cannot be derived, the tool never run', async () => {
    const copy = withKeyedExecutions(tools, callOf, () => {});
    const before = ran;
    await expect(copy.charge.execute({ amount: 1 }, { fail: true })).rejects.toThrow('no messages');
    expect(ran).toBe(before);
  });
});
