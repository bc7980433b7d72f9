// The Redis store's bound on its commands, kept by one timer for all of them
// (stores/redis/deadline.ts), answers as the plain bound with a timer per command (`withDeadline`).

import { describe, expect, it } from 'vitest';
import { SharedDeadline } from '../packages/idempotency/stores/redis/deadline.js';
import { withDeadline } from '../packages/idempotency/stores/support.js';

const never = () => new Promise<never>(() => {});

describe('one timer bounds every command, as a timer per command would', () => {
  it('fails a command that gets no reply, in the words of the plain bound', async () => {
    const plain = await withDeadline(never(), 20, 'Redis').catch((error: Error) => error.message);
    const shared = await new SharedDeadline(20, 'Redis')
      .bound(never())
      .catch((error: Error) => error.message);
    expect(shared).toBe(plain);
    expect(shared).toBe('no reply from Redis within 20 ms');
  });

  it('passes a reply and a refusal through unchanged', async () => {
    const deadline = new SharedDeadline(1_000, 'Redis');
    await expect(deadline.bound(Promise.resolve('claimed'))).resolves.toBe('claimed');
    const refusal = new Error('OOM command not allowed');
    await expect(deadline.bound(Promise.reject(refusal))).rejects.toBe(refusal);
  });

  it('fails every command left unanswered, sent before or after others were answered', async () => {
    const deadline = new SharedDeadline(20, 'Redis');
    const first = deadline.bound(never());
    const answered = deadline.bound(Promise.resolve(1));
    const later = new Promise((resolve) => setTimeout(resolve, 10)).then(() => deadline.bound(never()));
    const outcomes = await Promise.allSettled([first, answered, later]);
    expect(outcomes.map((outcome) => outcome.status)).toStrictEqual(['rejected', 'fulfilled', 'rejected']);

    // The timer is set again for the commands sent after it last fired.
    await expect(deadline.bound(never())).rejects.toThrow('no reply from Redis within 20 ms');
    await expect(deadline.bound(Promise.resolve('replayed'))).resolves.toBe('replayed');
  });
});
