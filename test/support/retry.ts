// A client retrying under the same key while the server says "nothing happened, retry later".

import { waitUntil } from '../../demo/processes/bounds.js';

/**
 * Sends `send` again while its answer is `refused` (the store unavailable, the key in progress):
 * the first answer that is not. Fails after `withinMs`.
 */
export async function untilAnswered<A>(
  send: () => Promise<A>,
  refused: (answer: A) => boolean,
  withinMs: number,
): Promise<A> {
  let answered: A | undefined;
  await waitUntil(async () => {
    const answer = await send();
    if (!refused(answer)) answered = answer;
    return answered !== undefined;
  }, withinMs);
  if (answered === undefined) throw new Error('unreachable: waitUntil returned without an answer');
  return answered;
}
