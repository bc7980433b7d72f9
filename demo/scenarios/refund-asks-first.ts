// --- Scenario 12: a multi-round-trip call under one key ---
//
// refund_order asks the user before it refunds (input_required on 2026-07-28). The question is
// not the call's answer: a guard that stored it as one would answer every continuation with the
// question again. The key must cover the rounds, and the retry of a lost confirming round.

import { callToolIdempotently } from 'mcp-request-idempotency/client';
import { balanceOf, connectToServer, resetLedger } from '../processes/launch.js';
import { expect, heading, say, sayAttempt, textOf } from './narration.js';
import { IMPATIENT_RETRIES, IMPATIENT_TIMEOUT_MS, SLOW_CHARGE_MS } from './timings.js';

export async function refundAsksFirst(): Promise<void> {
  const s = '12 multi-round refund';
  heading(
    "Scenario 12: a refund that asks first, and the confirming round's response is lost",
    `refund_order answers input_required (a question); the SDK client asks the user and sends the continuation by itself. The refund takes ${SLOW_CHARGE_MS} ms, the client gives up after ${IMPATIENT_TIMEOUT_MS} ms per round, then retries with the same key.`,
  );
  const questions: string[] = [];
  const server = await connectToServer(['--charge-latency-ms', String(SLOW_CHARGE_MS)], {
    askUser: async ({ message }) => {
      questions.push(message);
      say(`  the user is asked: "${message}" and says yes`);
      return { action: 'accept', content: { confirm: true } };
    },
  });
  try {
    await resetLedger(server.client);
    const { result, attempts } = await callToolIdempotently(
      server.client,
      { name: 'refund_order', arguments: { orderId: 'A-1001', amount: 4200 } },
      { policy: IMPATIENT_RETRIES, onAttempt: sayAttempt },
    );
    say(`  final answer: ${textOf(result)}`);
    const outcomes = attempts.map((a) => a.outcome);
    say(
      '  A guard that recorded input_required as the final answer would have answered the continuation with',
    );
    say('  the question again: the SDK client asks the user every round, up to its cap of 10, then gives up');
    say('  (INPUT_REQUIRED_ROUNDS_EXCEEDED), and nothing is ever refunded.');
    expect(
      s,
      "the confirming round's response was lost: attempt 1 timed out",
      outcomes[0] === 'timedOut',
      outcomes.join(' → '),
    );
    expect(s, 'the user was asked once', questions.length === 1, `${questions.length} question(s)`);
    expect(
      s,
      'the retry got the stored refund',
      textOf(result) === 'Refunded 4200 to order A-1001. New balance: -4200',
      textOf(result),
    );
    const balance = await balanceOf(server.client);
    expect(s, 'one refund on the ledger', balance === -4200, `balance ${balance}`);
    const decided = (await server.decisions()).map((d) => String(d.decision));
    say(`  the guard decided: ${decided.join(', ')}`);
    expect(
      s,
      'the opening round awaited input, and the confirming round executed once',
      decided[0] === 'awaitingInput' && decided.filter((d) => d === 'executed').length === 1,
      decided.join(', '),
    );
  } finally {
    await server.close();
  }
}
