// The LangChain middleware (agents/langchain.ts), called as LangChain's agent calls `wrapToolCall`,
// without LangChain: the key each call of an MCP tool runs with, derived from the thread, the model
// message that issued the call and the tool call's id; the calls it leaves unkeyed; the warning when
// no wire wrapper saw the call. (The real agent, its retries and resumes: test/interop.)

import { idempotencyKeyMiddleware } from 'mcp-request-idempotency/langchain';
import { describe, expect, it } from 'vitest';
import { agentToolCallKey, ownedIdempotencyKey } from '../../../packages/idempotency/agents/call.js';

type Request = Parameters<ReturnType<typeof idempotencyKeyMiddleware>['wrapToolCall']>[0];

const mcpTools = [{ name: 'charge' }, { name: 'refund' }];
const aiMessage = (id: string | undefined, ...toolCallIds: string[]) => ({
  ...(id !== undefined && { id }),
  tool_calls: toolCallIds.map((toolCallId) => ({ id: toolCallId, name: 'charge', args: {} })),
});

/** What LangChain hands `wrapToolCall` for the tool call `id` of `name`. */
const request = (name: string, id: string | undefined, messages: unknown[], threadId?: string): Request => ({
  toolCall: { name, id },
  state: { messages },
  runtime: { configurable: threadId === undefined ? {} : { thread_id: threadId } },
});

/** The middleware, the key its handler's tools/call is sent with, and the warnings it gave. */
async function keyOf(req: Request, tools = mcpTools) {
  const warnings: string[] = [];
  const middleware = idempotencyKeyMiddleware({ tools, onWarning: (m) => warnings.push(m) });
  const key = await middleware.wrapToolCall(req, async () => ownedIdempotencyKey(req.toolCall.name, {}));
  return { key, warnings };
}

describe('the LangChain middleware', () => {
  it('is a LangChain middleware as createMiddleware marks one, by a registered symbol', () => {
    const middleware = idempotencyKeyMiddleware({ tools: mcpTools });
    expect(Reflect.get(middleware, Symbol.for('AgentMiddleware'))).toBe(true);
    expect(middleware.name).toBe('IdempotencyKeyMiddleware');
  });

  it("runs an MCP tool's call with the key of its thread, its model message and its id", async () => {
    const messages = [{ id: 'human-1' }, aiMessage('run-abc', 'call_0')];
    const { key } = await keyOf(request('charge', 'call_0', messages, 'thread-9'));
    expect(key).toBe(
      agentToolCallKey({ thread: 'thread-9', response: 'run-abc', tool: 'charge', toolCallId: 'call_0' }),
    );
  });

  it('tells two responses that number their calls alike apart by the message that issued each', async () => {
    const first = aiMessage('resp-1', 'call_0');
    const second = aiMessage('resp-2', 'call_0');
    const a = await keyOf(request('charge', 'call_0', [first], 't'));
    const b = await keyOf(request('charge', 'call_0', [first, { id: 'tool-msg' }, second], 't'));
    expect(a.key).not.toBe(b.key);
    expect(b.key).toBe(
      agentToolCallKey({ thread: 't', response: 'resp-2', tool: 'charge', toolCallId: 'call_0' }),
    );
  });

  it('names a message without an id by its place, and a call no message carries by nothing', async () => {
    const placed = await keyOf(request('charge', 'call_0', [{}, aiMessage(undefined, 'call_0')], 't'));
    expect(placed.key).toBe(
      agentToolCallKey({ thread: 't', response: '#1', tool: 'charge', toolCallId: 'call_0' }),
    );
    const unplaced = await keyOf(request('charge', 'call_0', [], undefined));
    expect(unplaced.key).toBe(
      agentToolCallKey({ thread: '', response: '', tool: 'charge', toolCallId: 'call_0' }),
    );
  });

  it('gives every attempt of one call the one key: a retry inside it is the same call', async () => {
    const middleware = idempotencyKeyMiddleware({ tools: mcpTools, onWarning: () => {} });
    const req = request('charge', 'call_0', [aiMessage('resp-1', 'call_0')], 't');
    const keys = await middleware.wrapToolCall(req, async () => [
      ownedIdempotencyKey('charge', { amount: 1 }),
      ownedIdempotencyKey('charge', { amount: 1 }),
    ]);
    expect(new Set(keys)).toStrictEqual(
      new Set([agentToolCallKey({ thread: 't', response: 'resp-1', tool: 'charge', toolCallId: 'call_0' })]),
    );
  });

  it('leaves unkeyed a tool that is not an MCP tool, and a tool call without an id', async () => {
    const messages = [aiMessage('resp-1', 'call_0')];
    expect((await keyOf(request('subagent', 'call_0', messages, 't'))).key).toBeUndefined();
    expect((await keyOf(request('charge', undefined, messages, 't'))).key).toBeUndefined();
  });

  it('answers with what the tool answered, whether the handler returns or resolves it', async () => {
    const middleware = idempotencyKeyMiddleware({ tools: mcpTools, onWarning: () => {} });
    const req = request('charge', 'call_0', [], 't');
    expect(await middleware.wrapToolCall(req, () => 'sync')).toBe('sync');
    expect(await middleware.wrapToolCall(req, async () => 'async')).toBe('async');
    expect(await middleware.wrapToolCall(request('other', 'c', [], 't'), () => 'unkeyed')).toBe('unkeyed');
  });

  it('warns once when MCP tool calls went out past every wire wrapper, and not for other tools', async () => {
    const warnings: string[] = [];
    const middleware = idempotencyKeyMiddleware({ tools: mcpTools, onWarning: (m) => warnings.push(m) });
    for (const id of ['call_0', 'call_1'])
      await middleware.wrapToolCall(request('charge', id, [], 't'), () => 'sent unwrapped');
    await middleware.wrapToolCall(request('subagent', 'call_2', [], 't'), () => 'not an MCP tool');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(
      'The tools/call of charge went out without passing fetchWithIdempotencyKeys',
    );
  });
});
