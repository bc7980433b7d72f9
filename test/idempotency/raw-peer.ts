// A client that writes JSON-RPC by hand over an SDK's in-memory transport, and reads the answers as
// the server sent them: what a client of any make receives, before an SDK client parses (and strips)
// any of it. Shared by the unit tests that look at what an adapter puts on the wire.

import {
  CLIENT_CAPABILITIES_META_KEY,
  CLIENT_INFO_META_KEY,
  PROTOCOL_VERSION_META_KEY,
} from '@modelcontextprotocol/client';
import { Messages } from 'mcp-request-idempotency';
import { MODERN_PROTOCOL_VERSION } from '../../packages/idempotency/core/protocol.js';

type Message = Record<string, unknown>;

/** The client half of an SDK's linked in-memory pair (v1's or v2's: both have this shape). */
export interface PeerTransport {
  onmessage?: ((message: never) => void) | undefined;
  start(): Promise<void>;
  send(message: never, options?: never): Promise<void>;
  close(): Promise<void>;
}

/** The 2026-07-28 envelope every request of that era carries in `_meta`. */
export const MODERN_ENVELOPE = {
  [PROTOCOL_VERSION_META_KEY]: MODERN_PROTOCOL_VERSION,
  [CLIENT_INFO_META_KEY]: { name: 'raw-json-rpc', version: '0' },
  [CLIENT_CAPABILITIES_META_KEY]: {},
};

export class RawPeer {
  private nextId = 1;
  private readonly waiting = new Map<unknown, (message: Message) => void>();

  private constructor(
    private readonly transport: PeerTransport,
    private readonly envelope: Message | undefined,
  ) {
    transport.onmessage = ((message: Message) => {
      const resolve = this.waiting.get(message.id);
      if (resolve && ('result' in message || 'error' in message)) {
        this.waiting.delete(message.id);
        resolve(message);
      }
    }) as (message: never) => void;
  }

  /** A 2025-11-25 peer, its initialize handshake done; `initialize` is the server's answer to it. */
  static async legacy(transport: PeerTransport): Promise<{ peer: RawPeer; initialize: Message }> {
    const peer = new RawPeer(transport, undefined);
    await transport.start();
    const initialize = await peer.request('initialize', {
      protocolVersion: '2025-11-25',
      capabilities: {},
      clientInfo: { name: 'raw-json-rpc', version: '0' },
    });
    await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' } as never);
    return { peer, initialize };
  }

  /** A 2026-07-28 peer: no handshake, every request carries the envelope. */
  static async modern(transport: PeerTransport): Promise<RawPeer> {
    const peer = new RawPeer(transport, MODERN_ENVELOPE);
    await transport.start();
    return peer;
  }

  /**
   * Sends `method` with `params` (and the envelope, on 2026-07-28); the whole answer, as sent.
   * `options` go to the transport's `send` (v1's in-memory transport hands on `authInfo` so).
   */
  async request(method: string, params: Message, options?: Message): Promise<Message> {
    const id = this.nextId++;
    const answer = new Promise<Message>((resolve) => this.waiting.set(id, resolve));
    const withEnvelope = this.envelope ? { ...params, _meta: this.envelope } : params;
    await this.transport.send(
      { jsonrpc: '2.0', id, method, params: withEnvelope } as never,
      options as never,
    );
    return answer;
  }

  close(): Promise<void> {
    return this.transport.close();
  }
}

/** The SEP's conflict for `idempotencyKey`, exactly as the guard writes it on the wire (no prefix). */
export const conflictOnTheWire = (idempotencyKey: string) => ({
  code: -32602,
  message: Messages.conflict,
  data: { type: 'idempotency_key_conflict', idempotencyKey },
});
