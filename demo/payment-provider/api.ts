// --- The payment provider, as its own process ---
//
// A stand-in for a payment API that honours the `Idempotency-Key` request header the way the IETF
// draft "The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header) asks,
// with Stripe's choices where the draft leaves one open. The wire it serves is
// docs/provider-wire.md: that document is the contract, and any process that follows it can take
// this one's place. Everything lives in this one process: the balance, the key records, the commit
// log, the queued faults and the held responses.
//
//   npx tsx demo/payment-provider/api.ts --host 127.0.0.1 --port 0 [--latency-ms N] [--key-retention-seconds N]
//
// or, embedded: `const provider = await startProvider({ port: 0 })`, then `provider.close()`.
//
// This file starts it; the algorithm is `Provider.perform` (algorithm.ts), the wire's limits, errors
// and shapes are provider-wire.ts, and reading requests and writing answers is requests.ts.
//
// What a stand-in may skip and a real provider must not (don't copy these three):
// - An in-progress record here never expires: it lives in this process with the request it marks,
//   which forgets it on every way out. Records kept in a shared store outlive a crashed process,
//   so there an in-progress record needs a lease, renewed while the request runs (the MCP guard's
//   stores do exactly that).
// - Keys are scoped to the path only: this provider has one caller, the demo server. The draft
//   asks that a key be scoped to its client too (per API key or account), or one client's key
//   replays another's charge.
// - /reset, /faults, /release, /commits and /held answer anyone who can reach the port: they are
//   the tests' controls, for a provider bound to loopback (the default) and nowhere else.

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Provider } from './algorithm.js';
import {
  DEFAULT_KEY_RETENTION_SECONDS,
  ERROR_TYPES,
  MESSAGES,
  type ProviderOptions,
  type RunningProvider,
} from './provider-wire.js';
import { sendError } from './requests.js';

// --- Running it: embedded, or as a process ---

export async function startProvider(options: ProviderOptions = {}): Promise<RunningProvider> {
  const host = options.host ?? '127.0.0.1';
  const latencyMs = options.latencyMs ?? 0;
  const retentionSeconds = options.keyRetentionSeconds ?? DEFAULT_KEY_RETENTION_SECONDS;
  if (!(latencyMs >= 0 && Number.isFinite(latencyMs))) {
    throw new Error(`latencyMs must be a non-negative number, got ${latencyMs}`);
  }
  // A retention of 0 would keep no key at all, and sweep in a busy loop.
  if (!(retentionSeconds > 0 && Number.isFinite(retentionSeconds))) {
    throw new Error(`keyRetentionSeconds must be a positive number, got ${retentionSeconds}`);
  }
  const provider = new Provider(latencyMs, retentionSeconds * 1000);
  const server = createServer((req, res) => {
    provider.handle(req, res).catch((error: unknown) => {
      // Stdout carries the listening line only; what went wrong goes to stderr.
      process.stderr.write(`provider: ${error instanceof Error ? error.message : String(error)}\n`);
      if (res.headersSent || res.destroyed) res.destroy();
      else sendError(res, 500, ERROR_TYPES.internal, MESSAGES.unexpected);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, resolve);
  });
  const { port } = addressOf(server.address());
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    close: async () => {
      provider.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

function addressOf(address: string | AddressInfo | null): AddressInfo {
  if (address === null || typeof address === 'string') throw new Error(`not listening on TCP: ${address}`);
  return address;
}

/** A flag's value as a whole number no smaller than `min`, or an error naming the flag. */
function integerFlag(name: string, text: string | undefined, fallback: number, min: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < min) {
    throw new Error(`--${name} must be a whole number ≥ ${min}, got "${text}"`);
  }
  return value;
}

async function main(args: string[]): Promise<void> {
  // Exit at once, with success: there is nothing to flush, the state is meant to be thrown away.
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      host: { type: 'string' },
      port: { type: 'string' },
      'latency-ms': { type: 'string' },
      'key-retention-seconds': { type: 'string' },
    },
  });
  const port = integerFlag('port', values.port, 0, 0);
  if (port > 65_535) throw new Error(`--port must be at most 65535, got ${port}`);
  const provider = await startProvider({
    host: values.host ?? '127.0.0.1',
    port,
    latencyMs: integerFlag('latency-ms', values['latency-ms'], 0, 0),
    keyRetentionSeconds: integerFlag(
      'key-retention-seconds',
      values['key-retention-seconds'],
      DEFAULT_KEY_RETENTION_SECONDS,
      1,
    ),
  });
  // The one line on stdout: whoever started the process reads the URL from it.
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: provider.url })}\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`provider: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  });
}
