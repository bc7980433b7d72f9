// --- Multi-round-trip calls (2026-07-28): a continuation's claim ---
//
// The SEP leaves continuations out of its scope ("not a retry under this SEP's terms"); this is
// the project's rule for them, beside the algorithm rather than in it. A continuation is the same
// call again with the client's answer (`inputResponses`) and the echoed `requestState`: it may
// resume a key its opening round left awaiting input, and nothing else, so that a sealed
// `requestState` is never an authorization to be carried to a fresh key.

import type { Claim, RecordId } from '../stores/contract.js';
import { releaseSoon } from '../stores/support.js';
import type { Fingerprint } from './fingerprint.js';
import type { GuardSettings } from './options.js';

/** A continuation's claim, when no opening round under its key awaits input. */
export type Unopened = { state: 'unopened' };

/**
 * A continuation's claim takes over the key's awaiting-input record, and nothing else. The key is
 * first claimed as an opening round would claim it: one that held no record comes back claimed,
 * and is put back at once (`unopened`); any record comes back as it is. Only a key awaiting input,
 * with these arguments, is then claimed as a continuation. (Should the awaiting record expire in
 * between, its `requestState` expired with it, as the two windows are one, and is refused.)
 */
export async function claimContinuation(
  id: RecordId,
  fingerprint: Fingerprint,
  settings: GuardSettings,
): Promise<Claim | Unopened> {
  const held = await settings.store.claim(id, fingerprint, settings.leaseMs, false);
  if (held.state === 'claimed') {
    await releaseSoon(settings.store, held.ticket, settings.leaseMs).catch(() => {});
    return { state: 'unopened' } as const;
  }
  if (held.state !== 'awaitingInput' || held.fingerprint !== fingerprint) return held;
  return settings.store.claim(id, fingerprint, settings.leaseMs, true);
}
