// The protocol revisions the guard serves (core/protocol.ts): the stateless revision the SEP is
// written for, and the last revision with initialize, checked against what the installed SDKs speak,
// so that an SDK that drops either is noticed here, not in a server that answers nobody.

import { InMemoryTransport } from '@modelcontextprotocol/client';
import { LATEST_PROTOCOL_VERSION as V1_LATEST } from '@modelcontextprotocol/sdk/types.js';
import { McpServer, LATEST_PROTOCOL_VERSION as V2_LATEST } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { afterEach, describe, expect, it } from 'vitest';
import {
  LEGACY_PROTOCOL_VERSION,
  MODERN_PROTOCOL_VERSION,
} from '../../../packages/idempotency/core/protocol.js';
import { RawPeer } from '../raw-peer.js';

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

function served() {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const server = serveStdio(() => new McpServer({ name: 't', version: '0' }), { transport: serverSide });
  closers.push(() => server.close());
  return clientSide;
}

describe('the revisions the guard serves', () => {
  it("are the SEP's stateless revision and the last one with initialize, in that order of age", () => {
    expect(MODERN_PROTOCOL_VERSION).toBe('2026-07-28');
    expect(LEGACY_PROTOCOL_VERSION).toBe('2025-11-25');
    expect(LEGACY_PROTOCOL_VERSION < MODERN_PROTOCOL_VERSION).toBe(true);
  });

  it('name as legacy the newest initialize revision of both SDK lines', () => {
    expect(V1_LATEST).toBe(LEGACY_PROTOCOL_VERSION);
    expect(V2_LATEST).toBe(LEGACY_PROTOCOL_VERSION);
  });

  it('name as modern the one revision the v2 entry point lists in server/discover', async () => {
    const peer = await RawPeer.modern(served());
    const discover = await peer.request('server/discover', {});
    expect(discover).toMatchObject({ result: { supportedVersions: [MODERN_PROTOCOL_VERSION] } });
  });

  it('name as legacy the revision the v2 entry point agrees to in initialize', async () => {
    const { initialize } = await RawPeer.legacy(served());
    expect(initialize).toMatchObject({ result: { protocolVersion: LEGACY_PROTOCOL_VERSION } });
  });
});
