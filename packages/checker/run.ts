// --- One run of the checks: the server it talks to, the inputs it was given, every call it made ---
//
// A run makes each `tools/call` itself, counts them, and remembers the last one: a scenario that
// starts right after a call without a key reads the counter from it. A call that breaks the
// exchange (a timeout, a server that exited) breaks the run: nothing after it can be trusted.

import type { CounterOption } from './effect.js';
import { type Answer, isObject, type Peer } from './wire.js';

export type Args = Record<string, unknown>;

export interface CheckInputs {
  tool: string;
  arguments: Args;
  slowArguments?: Args;
  errorArguments?: Args;
  otherTool?: string;
  /** A second caller's connection to the same server (its own credentials), for scope. */
  other?: Peer;
  /** The same caller with credentials that may not call the tool, for authorization at replay. */
  forbidden?: Peer;
  /** Where the counter is, when the user says so (`--counter`). */
  counter?: CounterOption;
  transport: 'stdio' | 'http';
}

/** One `tools/call` as observed. `value` is its `result` or `error`: what "the same response" compares. */
export interface Call {
  answer: Answer;
  sentAt: number;
  kind: 'success' | 'tool error' | 'error';
  value: unknown;
}

export interface CallSpec {
  tool?: string;
  /** The `arguments` member exactly as sent; `null` leaves it out. */
  argumentsText?: string | null;
  key?: string;
  caller?: Peer;
}

/** Why the exchange with the server broke, and during which rule: the run stops there. */
export interface Broken {
  during: string;
  reason: string;
}

/** What one run of the checks knows and has done. */
export class Run {
  calls = 0;
  keyedCalls = 0;
  /** The rule being judged, named if the exchange breaks. */
  current = 'the calls without a key';
  broken: Broken | undefined;
  #last: Call | undefined;
  #lastProbe: Call | undefined;

  constructor(
    readonly peer: Peer,
    readonly inputs: CheckInputs,
  ) {}

  async call({ tool = this.inputs.tool, argumentsText, key, caller = this.peer }: CallSpec): Promise<Call> {
    if (this.broken) throw new Error(this.broken.reason);
    const args = argumentsText === undefined ? JSON.stringify(this.inputs.arguments) : argumentsText;
    const members = [`"name":${JSON.stringify(tool)}`];
    if (args !== null) members.push(`"arguments":${args}`);
    if (key !== undefined) members.push(`"idempotencyKey":${JSON.stringify(key)}`);
    this.calls += 1;
    if (key !== undefined) this.keyedCalls += 1;
    const sentAt = performance.now();
    let answer: Answer;
    try {
      answer = await caller.request('tools/call', `{${members.join(',')}}`, tool);
    } catch (error) {
      // A timeout, a server that exited, an HTTP failure: nothing after it can be trusted.
      const call = `tools/call ${tool}${key === undefined ? ' without a key' : ` with key ${key}`}`;
      // The call is named here, with its key; the transport's own naming of it would repeat it.
      const why = messageOf(error).replace(` (tools/call ${tool})`, '');
      this.broken ??= { during: this.current, reason: `${call}: ${why}` };
      throw new Error(this.broken.reason);
    }
    const { result, error } = answer.message;
    const call: Call = isObject(result)
      ? { answer, sentAt, kind: result.isError === true ? 'tool error' : 'success', value: result }
      : { answer, sentAt, kind: 'error', value: error };
    this.#last = call;
    return call;
  }

  /** A call without a key: it executes, and the counter it shows tells what ran before it. */
  async probe(): Promise<Call> {
    this.#lastProbe = await this.call({});
    return this.#lastProbe;
  }

  /** The counter as it stands, if the last call made was a probe: what a new scenario starts from. */
  standing(): Call | undefined {
    return this.#last === this.#lastProbe ? this.#lastProbe : undefined;
  }
}

export const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
