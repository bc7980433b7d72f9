// The key an agent adapter gives a tool call, and the tools/call it goes on, without a framework:
// plain tool objects of the AI SDK's shape, whose `execute` sends a tools/call through a transport
// the way a framework's MCP tool does. What is checked is what reaches the wire.

import { randomUUID } from 'node:crypto';
import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { transportWithIdempotencyKeys, withIdempotencyKeys } from 'mcp-request-idempotency/ai-sdk';
import { describe, expect, it } from 'vitest';

type Message = Record<string, unknown>;

/**
 * A transport that keeps what is sent; `answer` plays the server's side, `received` the client's.
 * (A client sets its handler when it connects.)
 */
class RecordingTransport {
  readonly sent: Message[] = [];
  readonly received: Message[] = [];
  onmessage?: (message: Message) => void = (message) => this.received.push(message);
  async send(message: Message): Promise<void> {
    this.sent.push(message);
  }
  answer(message: Message): void {
    this.onmessage?.(message);
  }
  /** The `idempotencyKey` of every tools/call sent, in order (undefined: sent without one). */
  keys(): unknown[] {
    return this.sent
      .filter((m) => m.method === 'tools/call')
      .map((m) => Reflect.get(Object(m.params), 'idempotencyKey'));
  }
}

/** An answer to initialize, with or without `tools.idempotency`. */
function initializeAnswer(id: number, idempotency: boolean): Message {
  const tools = idempotency ? { idempotency: {} } : {};
  return {
    jsonrpc: '2.0',
    id,
    result: { protocolVersion: '2025-11-25', capabilities: { tools }, serverInfo: { name: 'payments' } },
  };
}

let nextId = 1;
const toolsCall = (name: string, args: Record<string, unknown>): Message => ({
  jsonrpc: '2.0',
  id: nextId++,
  method: 'tools/call',
  params: { name, arguments: args },
});

/** An MCP tool as a framework makes one: `execute` sends its tools/call `sends` times (a retry). */
function mcpTool(transport: RecordingTransport, name: string, sends = 1) {
  return {
    description: name,
    execute: async (
      input: Record<string, unknown>,
      _options: { toolCallId: string; messages: unknown[] },
    ) => {
      for (let i = 0; i < sends; i++) await transport.send(toolsCall(name, input));
      return `${name} done`;
    },
  };
}

const options = (toolCallId: string, messages: unknown[] = [{ role: 'user' }]) => ({ toolCallId, messages });

describe('the key of a tool call', () => {
  it("passes the guard's key rules, whatever the provider's ids contain", async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    const thread = `chat\u0000${'x'.repeat(300)}`;
    const tools = withIdempotencyKeys({ charge: mcpTool(transport, 'charge') }, { thread });
    await tools.charge.execute({ amount: 1 }, options(`call\n${'é'.repeat(400)}`));
    const [key] = transport.keys();
    expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
  });

  it('is the same on every retry of the call, and on every execution of it (a resume, a replay)', async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    const tools = withIdempotencyKeys({ charge: mcpTool(transport, 'charge', 2) }, { thread: 'chat-1' });
    await tools.charge.execute({ amount: 1 }, options('call_0'));
    await tools.charge.execute({ amount: 1 }, options('call_0'));
    const keys = transport.keys();
    expect(keys).toHaveLength(4);
    expect(new Set(keys).size).toBe(1);
  });

  it('differs with the thread, the response, the tool or the tool-call id', async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    const keyedIn = (thread: string) =>
      withIdempotencyKeys(
        { charge: mcpTool(transport, 'charge'), refund: mcpTool(transport, 'refund') },
        { thread },
      );
    await keyedIn('chat-1').charge.execute({ amount: 1 }, options('call_0'));
    await keyedIn('chat-2').charge.execute({ amount: 1 }, options('call_0')); // another run, ids numbered alike
    await keyedIn('chat-1').charge.execute({ amount: 1 }, options('call_0', [{}, {}, {}])); // a later response
    await keyedIn('chat-1').refund.execute({ amount: 1 }, options('call_0'));
    await keyedIn('chat-1').charge.execute({ amount: 1 }, options('call_1'));
    expect(new Set(transport.keys()).size).toBe(5);
  });
});

describe('the AI SDK key, one chat, one generateText({ prompt }) per turn', () => {
  // The set-up the docs give: one thread for the chat, no history sent, a provider that numbers
  // its tool-call ids per response. Each turn's messages are its prompt alone, one message long.
  const turn = (prompt: string) => options('call_0', [{ role: 'user', content: prompt }]);

  it('gives two turns that each charge their own key: the second executes, it is not the first replayed', async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    const tools = withIdempotencyKeys({ charge: mcpTool(transport, 'charge') }, { thread: 'chat-1' });
    await tools.charge.execute({ amount: 100 }, turn('Charge 100 for order A.'));
    await tools.charge.execute({ amount: 100 }, turn('Charge 100 for order B.'));
    expect(new Set(transport.keys()).size).toBe(2);
  });

  it('keeps the one key when the same turn is sent again (its retry)', async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    const tools = withIdempotencyKeys({ charge: mcpTool(transport, 'charge') }, { thread: 'chat-1' });
    await tools.charge.execute({ amount: 100 }, turn('Charge 100 for order A.'));
    await tools.charge.execute({ amount: 100 }, turn('Charge 100 for order A.'));
    expect(transport.keys()).toHaveLength(2);
    expect(new Set(transport.keys()).size).toBe(1);
  });
});

describe('the tools/call the key goes on', () => {
  it('is only the one the tool call sends: another call made while it runs goes without it', async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    const nested = {
      execute: async (
        input: Record<string, unknown>,
        _options: { toolCallId: string; messages: unknown[] },
      ) => {
        await transport.send(toolsCall('charge', input)); // the tool's own call
        await transport.send(toolsCall('get_balance', {})); // made by something else while it runs
        await transport.send(toolsCall('charge', { amount: 999 })); // another charge: not a retry
        await transport.send(toolsCall('charge', input)); // a retry of its own
      },
    };
    const tools = withIdempotencyKeys({ charge: nested }, { thread: 'chat-1' });
    await tools.charge.execute({ amount: 1 }, options('call_0'));
    const [own, other, another, retry] = transport.keys();
    expect(typeof own).toBe('string');
    expect([other, another]).toStrictEqual([undefined, undefined]);
    expect(retry).toBe(own);
  });

  it('goes without a key outside a tool call, and keeps a key the caller gave it', async () => {
    const warnings: string[] = [];
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    await transport.send(toolsCall('charge', { amount: 1 }));
    const tools = withIdempotencyKeys(
      {
        charge: {
          execute: async (_input: unknown, _options: { toolCallId: string; messages: unknown[] }) => {
            const call = toolsCall('charge', { amount: 1 });
            await transport.send({ ...call, params: { ...Object(call.params), idempotencyKey: 'mine' } });
          },
        },
      },
      { thread: 'chat-1', onWarning: (w) => warnings.push(w) },
    );
    await tools.charge.execute({}, options('call_0'));
    expect(transport.keys()).toStrictEqual([undefined, 'mine']);
    expect(warnings).toStrictEqual([]);
  });
});

describe('a server that does not advertise tools.idempotency', () => {
  it('gets its calls exactly as before, without a key, and the program is told once', async () => {
    const warnings: string[] = [];
    const transport = transportWithIdempotencyKeys(new RecordingTransport(), {
      onWarning: (w) => warnings.push(w),
    });
    const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: {} };
    await transport.send(initialize);
    transport.answer(initializeAnswer(0, false));
    const tools = withIdempotencyKeys({ charge: mcpTool(transport, 'charge') }, { thread: randomUUID() });
    await tools.charge.execute({ amount: 1 }, options('call_0'));
    await tools.charge.execute({ amount: 1 }, options('call_1'));
    expect(transport.sent.slice(1)).toStrictEqual([
      {
        jsonrpc: '2.0',
        id: expect.any(Number),
        method: 'tools/call',
        params: { name: 'charge', arguments: { amount: 1 } },
      },
      {
        jsonrpc: '2.0',
        id: expect.any(Number),
        method: 'tools/call',
        params: { name: 'charge', arguments: { amount: 1 } },
      },
    ]);
    expect(transport.received).toStrictEqual([initializeAnswer(0, false)]);
    expect(warnings).toStrictEqual([
      'The MCP server payments does not advertise capabilities.tools.idempotency: tool calls go to it without an idempotencyKey, as before, and a retry of one may execute it again.',
    ]);
  });

  it('is told apart from one that does: that one gets the key', async () => {
    const transport = transportWithIdempotencyKeys(new RecordingTransport());
    await transport.send({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {} });
    transport.answer(initializeAnswer(0, true));
    const tools = withIdempotencyKeys({ charge: mcpTool(transport, 'charge') }, { thread: 'chat-1' });
    await tools.charge.execute({ amount: 1 }, options('call_0'));
    expect(transport.keys()).toStrictEqual([expect.stringMatching(/^agent-[\w-]{43}$/)]);
  });
});

describe('the proof that both hooks are in place', () => {
  it('warns once when a keyed tool call was sent past every wrapper, so carried no key', async () => {
    const warnings: string[] = [];
    const unwrapped = new RecordingTransport();
    const tools = withIdempotencyKeys(
      { charge: mcpTool(unwrapped, 'charge') },
      { thread: 'chat-1', onWarning: (w) => warnings.push(w) },
    );
    await tools.charge.execute({ amount: 1 }, options('call_0'));
    await tools.charge.execute({ amount: 1 }, options('call_1'));
    expect(unwrapped.keys()).toStrictEqual([undefined, undefined]);
    expect(warnings).toStrictEqual([
      'The tools/call of charge went out without passing fetchWithIdempotencyKeys or transportWithIdempotencyKeys, so it carried no idempotencyKey and a retry of it may execute it again: give the MCP client one of them.',
    ]);
  });
});
