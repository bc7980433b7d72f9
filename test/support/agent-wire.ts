// The wire of an agent framework's MCP client, without the framework: a transport wrapped as the
// adapters wrap one, that keeps the idempotencyKey each tools/call it sends carries. A tool's
// `execute` sends its call through it, as a framework's MCP tool does.

import { transportWithIdempotencyKeys } from 'mcp-request-idempotency/ai-sdk';

export interface AgentWire {
  /** Sends a tools/call of `name` with `args`, as the framework's MCP tool would. */
  send(name: string, args: unknown): Promise<void>;
  /** The key each tools/call sent so far carried, in order (undefined: none). */
  keys(): unknown[];
}

export function agentWire(): AgentWire {
  const keys: unknown[] = [];
  const transport = transportWithIdempotencyKeys({
    async send(message: object) {
      const params: unknown = Reflect.get(message, 'params');
      keys.push(
        typeof params === 'object' && params !== null ? Reflect.get(params, 'idempotencyKey') : undefined,
      );
    },
  });
  let id = 0;
  return {
    send: (name, args) =>
      transport.send({ jsonrpc: '2.0', id: id++, method: 'tools/call', params: { name, arguments: args } }),
    keys: () => [...keys],
  };
}
