// The server's provider hop when the provider is not at the root of its host: a payment API is
// commonly reached through a gateway under a path (`https://gateway.example/pay/v1`), and every
// request must keep that path.

import { createServer, request, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderLedger } from '../../../../demo/hosting/ledgers/provider.js';
import { startProvider } from '../../../../demo/payment-provider/api.js';
import type { RunningProvider } from '../../../../demo/payment-provider/provider-wire.js';

const PREFIX = '/pay/v1';

/** A gateway serving the provider under `PREFIX` only; anything else is 404 and never reaches it. */
function gateway(upstream: URL): Server {
  return createServer((req, res) => {
    const url = req.url ?? '/';
    if (!url.startsWith(`${PREFIX}/`)) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"type":"not_found","message":"not under the gateway\'s path"}}');
      return;
    }
    const forwarded = request(
      new URL(url.slice(PREFIX.length), upstream),
      { method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forwarded.on('error', () => res.destroy());
    req.pipe(forwarded);
  });
}

describe('a provider reached under a path', () => {
  let provider: RunningProvider;
  let front: Server;
  let base: URL;
  beforeAll(async () => {
    provider = await startProvider({ port: 0 });
    front = gateway(new URL(provider.url));
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    const address = front.address();
    if (address === null || typeof address === 'string') throw new Error(`not listening on TCP: ${address}`);
    base = new URL(`http://127.0.0.1:${address.port}${PREFIX}`);
  });
  afterAll(async () => {
    front.closeAllConnections();
    await new Promise((resolve) => front.close(resolve));
    await provider.close();
  });

  it.each([
    ['without a trailing slash', ''],
    ['with a trailing slash', '/'],
  ])('is charged, read and reset under that path, %s', async (_, slash) => {
    const ledger = new ProviderLedger(new URL(`${base.href}${slash}`), { attempts: 1 });
    await ledger.reset();
    expect(await ledger.charge(250, { idempotencyKey: crypto.randomUUID() })).toBe(250);
    expect(await ledger.refund(50, { orderId: 'order-1', idempotencyKey: crypto.randomUUID() })).toBe(200);
    expect(await ledger.balance()).toBe(200);
    await ledger.reset();
    expect(await ledger.balance()).toBe(0);
  });
});
