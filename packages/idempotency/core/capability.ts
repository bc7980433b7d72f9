// --- The capability (SEP-3182): `{"capabilities":{"tools":{"idempotency":{}}}}` ---
//
// Read where the client helpers (client/client.ts) and the agent adapters' wire (agents/wire.ts) both
// reach it, without either SDK: the agent frameworks bring MCP clients of their own.

/** SEP: `{"capabilities":{"tools":{"idempotency":{}}}}`, intentionally empty. */
export function advertisesIdempotency(capabilities: unknown): boolean {
  const tools: unknown = field(capabilities, 'tools');
  const idempotency: unknown = field(tools, 'idempotency');
  return typeof idempotency === 'object' && idempotency !== null;
}

/** `value[name]` of a value parsed from JSON, whatever it turned out to be. */
export function field(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}

/** The capability a server advertises: `capabilities.tools.idempotency`, intentionally empty. */
export const IDEMPOTENCY_CAPABILITY = { idempotency: {} } as const;
