// --- Scenario 17: what the guard decided, where an operator looks ---
//
// A server started with `--metrics-port` serves the guard's figures as Prometheus text. Keyed calls
// meet each of the SEP's answers once or twice; the scrape counts exactly those, by decision and
// tool, and holds no key and no principal.

import { randomUUID } from 'node:crypto';
import { callTool } from 'mcp-request-idempotency/client';
import { connectHttpClient, startHttpInstance } from '../processes/launch.js';
import { decisionCounts, scrape, total } from '../processes/scrape.js';
import { errorFrom, expect, heading, say } from './narration.js';
import { SLOW_CHARGE_MS, sleep } from './timings.js';

export async function decisionsScraped(): Promise<void> {
  const s = '17 decisions scraped';
  heading(
    'Scenario 17: what the guard decided, scraped by Prometheus',
    `Stateless HTTP with --metrics-port; every charge takes ${SLOW_CHARGE_MS} ms. Alice's keyed calls meet each answer, then /metrics is read as Prometheus reads it.`,
  );
  const instance = await startHttpInstance(
    ['--metrics-port', '0', '--charge-latency-ms', String(SLOW_CHARGE_MS)],
    { DEMO_BEARER_TOKENS: 'alice:token-alice' },
  );
  const alice = await connectHttpClient(instance.url, { token: 'token-alice' });
  try {
    const charge = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    await callTool(alice, charge);
    await callTool(alice, charge);
    await errorFrom(callTool(alice, { ...charge, arguments: { amount: 999 } }));
    const second = { ...charge, idempotencyKey: randomUUID() };
    const original = callTool(alice, second);
    await sleep(SLOW_CHARGE_MS / 4);
    await errorFrom(callTool(alice, second));
    await original;
    const read = { name: 'get_balance', arguments: {}, idempotencyKey: randomUUID() };
    await callTool(alice, read);
    await errorFrom(callTool(alice, { ...read, idempotencyKey: '' }));
    const made = new Map([
      ['executed charge_guarded', 2],
      ['replayed charge_guarded', 1],
      ['conflict charge_guarded', 1],
      ['inProgress charge_guarded', 1],
      ['executed get_balance', 1],
      ['invalid get_balance', 1],
    ]);
    say('  the calls made: a charge, its retry, the key with 999, a second charge and its duplicate');
    say('  while it ran, a keyed get_balance, and one with an empty key');

    if (!instance.metricsUrl) throw new Error('the server logged no metrics URL');
    const { text, samples } = await scrape(instance.metricsUrl);
    say(`  GET ${instance.metricsUrl.href}:`);
    for (const line of text.split('\n').filter((l) => l.startsWith('idempotency_decisions_total')))
      say(`    ${line}`);
    const counted = decisionCounts(samples);
    const shown = (counts: Map<string, number>) => [...counts].map(([k, n]) => `${k} ${n}`).join(', ');
    expect(
      s,
      'the scrape counts exactly the decisions the calls met, by decision and tool',
      [...made].every(([k, n]) => counted.get(k) === n) && counted.size === made.size,
      shown(counted),
    );
    const claims = total(samples, 'idempotency_store_operation_duration_count', {
      idempotency_store_operation: 'claim',
    });
    expect(
      s,
      'every keyed call with a valid key made one timed claim of the store',
      claims === 6,
      `${claims} claims timed`,
    );
    const secrets = [charge.idempotencyKey, second.idempotencyKey, read.idempotencyKey, 'alice', 'token-'];
    const leaked = secrets.filter((secret) => text.includes(secret));
    expect(
      s,
      'no key, principal or token anywhere in the scrape',
      leaked.length === 0,
      leaked.join(', ') || 'none',
    );
  } finally {
    await alice.close();
    await instance.stop();
  }
}
