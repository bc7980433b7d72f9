// --- Scenarios 14 and 15: the other hop, the server's call to the payment provider ---
//
// demo/payment-provider/api.ts, a payment API in a process of its own that takes an Idempotency-Key, stands in
// for Stripe. Each window is shown twice: with `--provider-keys none` (the server sends no key:
// the provider that takes no keys, where the window is open) and with the key the guard derives
// from the MCP call (closed). One provider process serves both scenarios, faulted anew for each call.

import { randomUUID } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool, type KeyedToolCall } from 'mcp-request-idempotency/client';
import {
  connectHttpClient,
  connectToServer,
  type ServerConnection,
  startHttpInstance,
} from '../processes/launch.js';
import {
  type Commit,
  PROVIDER_IMPLEMENTATIONS,
  type ProviderProcess,
  startProviderProcess,
} from '../processes/payment-provider.js';
import { startRedis, type TestRedis } from '../processes/redis-server.js';
import { backendFor, DEMO_REDIS_PREFIX, REDIS_ABSENT } from './installed-backends.js';
import { errorFrom, expect, heading, say, textOf } from './narration.js';
import { sleep } from './timings.js';

type ProviderKeys = 'none' | 'derived';
const PROVIDER_KEY_CHOICES: ProviderKeys[] = ['none', 'derived'];

/**
 * Scenarios 14 and 15: the project's provider, and Redis for 15's HTTP half when there is one,
 * looked for once that half is next, so that what it says prints under 15's heading.
 */
export async function runProviderScenarios(): Promise<void> {
  const provider = await startProviderProcess(PROVIDER_IMPLEMENTATIONS[0]?.command ?? []);
  let redis: TestRedis | undefined;
  try {
    await providerAnswerLost(provider);
    await serverKilledMidAnswer(provider, async () => {
      redis = await backendFor("Scenario 15's HTTP half (on Redis)", startRedis, REDIS_ABSENT);
      return redis?.url;
    });
  } finally {
    await provider.stop();
    await redis?.flush(DEMO_REDIS_PREFIX);
    await redis?.stop();
  }
}

function describeCommits(commits: Commit[]): string {
  const keys = commits.map((c) => (c.idempotencyKey ? `${c.idempotencyKey.slice(0, 12)}…` : 'no key'));
  return `${commits.length} commit(s): ${keys.join(', ')}`;
}

async function providerAnswerLost(provider: ProviderProcess): Promise<void> {
  const s = '14 provider answer lost';
  heading(
    "Scenario 14: the provider's answer is lost after it committed",
    'charge_guarded(100): the provider commits, then resets the socket before answering. The server retries its own request; only the provider key makes that retry safe. The MCP client never notices either way.',
  );
  for (const keys of PROVIDER_KEY_CHOICES) {
    const server = await connectToServer(['--provider-url', provider.url, '--provider-keys', keys]);
    try {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: 'drop-after-commit' });
      const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
      const answer = textOf(await callTool(server.client, call));
      const commits = await provider.commits();
      say(
        `  --provider-keys ${keys}: the MCP client got "${answer}"; the provider: ${describeCommits(commits)}`,
      );
      if (keys === 'none')
        expect(
          s,
          "no provider key: the server's own retry charged again (two charges)",
          commits.length === 2,
          describeCommits(commits),
        );
      else {
        expect(s, 'the provider key carried: one charge', commits.length === 1, describeCommits(commits));
        expect(
          s,
          'the client got the answer it would have got',
          answer === 'Charged 100. New balance: 100',
          answer,
        );
      }
    } finally {
      await server.close();
    }
  }
  const server = await connectToServer(['--provider-url', provider.url]);
  try {
    await provider.reset();
    await provider.queueFault({ path: '/charges', fault: 'drop-after-commit' });
    const answer = textOf(
      await callTool(server.client, { name: 'charge_unguarded', arguments: { amount: 100 } }),
    );
    const commits = await provider.commits();
    say(`  a call without an MCP key: "${answer}"; the provider: ${describeCommits(commits)}`);
    expect(
      s,
      'without an MCP key too: one charge (the execution has a provider key of its own)',
      commits.length === 1,
      describeCommits(commits),
    );
  } finally {
    await server.close();
  }
}

/** Where a keyed call starts, and where its retry goes once the first server is killed. */
interface KillAndRetry {
  label: string;
  call(call: KeyedToolCall): Promise<CallToolResult>;
  kill(): Promise<void>;
  retry(call: KeyedToolCall): Promise<CallToolResult>;
  close(): Promise<void>;
}

async function stdioRespawned(args: string[]): Promise<KillAndRetry> {
  const first = await connectToServer(args);
  const later: ServerConnection[] = [];
  return {
    label: 'stdio, the server respawned',
    call: (call) => callTool(first.client, call),
    kill: () => first.kill(),
    retry: async (call) => {
      const fresh = await connectToServer(args);
      later.push(fresh);
      return callTool(fresh.client, call);
    },
    close: async () => void (await Promise.allSettled([first.close(), ...later.map((c) => c.close())])),
  };
}

/** The lease a killed instance's claim holds its key for, short in the demo (the default is 120 s). */
const DEMO_LEASE_MS = 1_000;

async function httpOnRedis(args: string[], redisUrl: string): Promise<KillAndRetry> {
  const shared = ['--store', 'redis', '--redis-url', redisUrl, '--redis-prefix', DEMO_REDIS_PREFIX];
  const options = [...shared, '--in-progress-lease-ms', String(DEMO_LEASE_MS), ...args];
  const [a, b] = await Promise.all([startHttpInstance(options), startHttpInstance(options)]);
  const [viaA, viaB] = await Promise.all([connectHttpClient(a.url), connectHttpClient(b.url)]);
  return {
    label: `HTTP, the retry on instance B (Redis; lease ${DEMO_LEASE_MS} ms)`,
    call: (call) => callTool(viaA, call),
    kill: () => a.kill(),
    // B answers in progress until A's claim runs out its lease: A is dead, and nothing says so.
    retry: async (call) => {
      for (let attempt = 1; ; attempt += 1) {
        const error = await errorFrom(callTool(viaB, call));
        if (idempotencyErrorOf(error)?.type !== IdempotencyErrorType.inProgress || attempt === 50)
          return callTool(viaB, call);
        await sleep(100);
      }
    },
    close: async () => {
      await Promise.allSettled([viaA.close(), viaB.close()]);
      await Promise.allSettled([a.stop(), b.stop()]);
    },
  };
}

async function serverKilledMidAnswer(
  provider: ProviderProcess,
  redisUrlFor: () => Promise<string | undefined>,
): Promise<void> {
  heading(
    "Scenario 15: the server is killed while the provider's committed answer is on its way",
    "The provider commits charge_guarded(100) and holds its answer; the server is SIGKILLed. Its record was never written, so the retry, same MCP key, executes again on a fresh server: the SEP's one stated limit, closed by the provider key.",
  );
  await killedMidAnswerOn(provider, stdioRespawned);
  const redisUrl = await redisUrlFor();
  if (redisUrl) await killedMidAnswerOn(provider, (args) => httpOnRedis(args, redisUrl));
  else say("  (the HTTP half is skipped: it needs Redis, for instance B to share A's records)");
}

/** Scenario 15 on one setup: the server killed while the provider holds its committed answer. */
async function killedMidAnswerOn(
  provider: ProviderProcess,
  setup: (args: string[]) => Promise<KillAndRetry>,
): Promise<void> {
  const s = '15 server killed';
  for (const keys of PROVIDER_KEY_CHOICES) {
    await provider.reset();
    const where = await setup(['--provider-url', provider.url, '--provider-keys', keys]);
    try {
      await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
      const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
      const lost = errorFrom(where.call(call));
      while ((await provider.held()) === 0) await sleep(20);
      await where.kill();
      await lost;
      await provider.release();
      const answer = textOf(await where.retry(call));
      const commits = await provider.commits();
      say(
        `  ${where.label}, --provider-keys ${keys}: the retry got "${answer}"; the provider: ${describeCommits(commits)}`,
      );
      if (keys === 'none')
        expect(
          s,
          `${where.label}, no provider key: charged twice`,
          commits.length === 2,
          describeCommits(commits),
        );
      else
        expect(
          s,
          `${where.label}, the provider key carried: one charge, and the answer it would have got`,
          commits.length === 1 && answer === 'Charged 100. New balance: 100',
          `${describeCommits(commits)}; "${answer}"`,
        );
    } finally {
      await where.close();
    }
  }
}
