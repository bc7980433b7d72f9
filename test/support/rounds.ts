// One multi-round-trip round, sent by hand: what the client sends is exactly what the test wrote,
// and an `input_required` answer comes back to the test instead of being fulfilled by the SDK.

import type { Client } from '@modelcontextprotocol/client';

/** What one round answered, as the client saw it: a result (maybe `input_required`) or a JSON-RPC error. */
export type Answer =
  | { result: Record<string, unknown>; error?: undefined }
  | { error: { code: unknown; data: unknown }; result?: undefined };

export async function round(client: Client, params: Record<string, unknown>): Promise<Answer> {
  try {
    const result = await client.request({ method: 'tools/call', params }, { allowInputRequired: true });
    return { result: result as Record<string, unknown> };
  } catch (error) {
    return { error: { code: Reflect.get(Object(error), 'code'), data: Reflect.get(Object(error), 'data') } };
  }
}
