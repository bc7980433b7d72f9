// --- What a judge concludes about one rule, before the rule's severity makes it a status ---

/** What a judge concludes; the rule's severity turns a broken rule into a failure or a warning. */
export interface Verdict {
  outcome: 'holds' | 'broken' | 'not applicable' | 'not checkable';
  observed: string;
}
export const pass = (observed: string): Verdict => ({ outcome: 'holds', observed });
export const fail = (observed: string): Verdict => ({ outcome: 'broken', observed });
export const na = (observed: string): Verdict => ({ outcome: 'not applicable', observed });
export const nc = (observed: string): Verdict => ({ outcome: 'not checkable', observed });
