// What every agent framework's test file stands on: the demo's guarded server over stateless HTTP,
// its ledger (reset before each test, read with get_balance), and loopback proxies in front of it
// that lose an answer after the server ran the call and note every tools/call on the wire; and the
// verdicts every framework's calls get, read off the ledger and the wire.

import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { afterAll, beforeAll, beforeEach, expect } from 'vitest';
import {
  balanceOf,
  connectHttpClient,
  type HttpInstance,
  resetLedger,
  startHttpInstance,
} from '../../../demo/processes/launch.js';
import { type Fault, type FaultProxy, startFaultProxy } from '../../support/fault-proxy.js';
import { findNode24, INSTALL_TIMEOUT_MS } from '../../support/node24.js';

/**
 * The demo's own MCP client, as demo/processes/launch.ts connects it: named from there, since this
 * folder's install holds another copy of the SDK (the one Mastra pins).
 */
type Client = Awaited<ReturnType<typeof connectHttpClient>>;

/** The tool every agent here is scripted to call: a charge of 100, through the guard. */
export const CHARGE_TOOL = 'charge_guarded';

export interface AgentTestBed {
  /** Executions of the charge so far, as the ledger shows them: its balance. */
  balance(): Promise<number>;
  /**
   * A proxy in front of the server: the first charge gets `fault` once the server has answered it
   * (none: every call goes through, and the proxy only notes the wire). Closed after the file.
   */
  proxy(fault?: Fault): Promise<FaultProxy>;
  /** A Node 24 binary, for frameworks whose current release needs Node 22 (with `node24`). */
  node24(): string;
}

/** Sets up the file's hooks: call it at the top of a test file. */
export function agentTestBed({ node24 = false } = {}): AgentTestBed {
  let instance: HttpInstance | undefined;
  let reader: Client | undefined;
  let node: string | undefined;
  const proxies: FaultProxy[] = [];
  const started = () => {
    if (!instance || !reader)
      throw new Error('the agent test bed is not set up: call agentTestBed() at the top');
    return { instance, reader };
  };
  beforeAll(async () => {
    if (node24) node = await findNode24();
    instance = await startHttpInstance();
    reader = await connectHttpClient(instance.url);
  }, INSTALL_TIMEOUT_MS);
  beforeEach(() => resetLedger(started().reader));
  afterAll(async () => {
    await Promise.all(proxies.map((p) => p.close()));
    await reader?.close();
    await instance?.stop(5_000);
  });
  return {
    balance: () => balanceOf(started().reader),
    proxy: async (fault) => {
      const plan = { fault: fault ?? 'badGateway', tool: CHARGE_TOOL, times: fault ? 1 : 0 };
      const proxy = await startFaultProxy(started().instance.url, plan);
      proxies.push(proxy);
      return proxy;
    },
    node24: () => {
      if (!node) throw new Error('agentTestBed({ node24: true }) finds the Node 24 binary');
      return node;
    },
  };
}

/** The key each tools/call of the charge carried through `proxy`, in order (undefined: none). */
export function chargeKeys(proxy: FaultProxy): unknown[] {
  return proxy.calls.filter((c) => c.name === CHARGE_TOOL).map((c) => c.idempotencyKey);
}

/** Two charges went through `proxy` unkeyed, and both executed: 200. */
export async function expectTwoUnkeyedCharges(bed: AgentTestBed, proxy: FaultProxy): Promise<void> {
  expect(await bed.balance()).toBe(200);
  expect(chargeKeys(proxy)).toStrictEqual([undefined, undefined]);
}

/** The charge was sent twice through `proxy` under one valid key, and executed once: 100. */
export async function expectOneKeyOneCharge(bed: AgentTestBed, proxy: FaultProxy): Promise<void> {
  expect(await bed.balance()).toBe(100);
  const [key, again] = chargeKeys(proxy);
  expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
  expect(again).toBe(key);
}

/** Two charges went through `proxy` under two valid keys, and both executed: 200, neither replayed. */
export async function expectTwoKeysTwoCharges(bed: AgentTestBed, proxy: FaultProxy): Promise<void> {
  expect(await bed.balance()).toBe(200);
  const [first, second] = chargeKeys(proxy);
  expect(checkIdempotencyKey(first)).toStrictEqual({ ok: true, key: first });
  expect(checkIdempotencyKey(second)).toStrictEqual({ ok: true, key: second });
  expect(second).not.toBe(first);
}
