// Random faults on both hops at once, against the one invariant that matters to the customer:
// the provider's commit log. Each program is a list of keyed charges, made one after another by
// one client against one server (restarted when a fault kills it); each charge meets up to
// three provider faults (consumed by the server's own retries) and one fault on the MCP hop (its
// answer lost, the server killed while the provider holds its answer, or killed after the
// record, with a memory store that forgets everything on restart). The client retries every
// charge with its MCP key until it has a definitive answer. Whatever happened, every charge must
// be committed exactly once and answered with its own commit.

import { randomUUID } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/client';
import fc from 'fast-check';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool, type KeyedToolCall } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleep, waitUntil } from '../../demo/processes/bounds.js';
import { connectToServer, type ServerConnection } from '../../demo/processes/launch.js';
import {
  type FaultKind,
  PROVIDER_IMPLEMENTATIONS,
  type ProviderImplementation,
  type ProviderProcess,
  startProviderProcess,
} from '../../demo/processes/payment-provider.js';
import { textOf } from '../support/sep-cases.js';

/** Faults the server's own retry loop meets; each is consumed by one request to the provider. */
const PROVIDER_FAULTS: FaultKind[] = [
  'drop-after-commit',
  '502-before-commit',
  '502-after-commit',
  '500-before-commit',
  'garbage-after-commit',
];
const MCP_FAULTS = ['none', 'answerLost', 'killedWhileHeld', 'killedAfterRecord'] as const;
type McpFault = (typeof MCP_FAULTS)[number];

interface Charge {
  amount: number;
  providerFaults: FaultKind[];
  mcpFault: McpFault;
}

const programs = fc.array(
  fc.record({
    amount: fc.integer({ min: 1, max: 10_000 }),
    providerFaults: fc.array(fc.constantFrom(...PROVIDER_FAULTS), { maxLength: 3 }),
    // Half the charges meet no MCP-hop fault, so their provider faults all reach the server's own
    // retries (after an MCP-hop fault, the retry is usually a replay, which consumes none).
    mcpFault: fc.oneof(
      { arbitrary: fc.constant('none' as const), weight: 3 },
      fc.constantFrom(...MCP_FAULTS.slice(1)),
    ),
  }),
  { minLength: 1, maxLength: 5 },
);

/** The client waits this long in the "answer lost" faults; the provider then takes three times as long. */
const IMPATIENT_MS = 100;
/** Attempts a client makes per charge before the run counts as failed. */
const CLIENT_ATTEMPTS = 12;

function describeModel(implementation: ProviderImplementation, numRuns: number): void {
  describe(`random faults on both hops (${implementation.name})`, () => {
    let provider: ProviderProcess;
    let server: ServerConnection | undefined;
    const args = () => ['--provider-url', provider.url];
    const faultsSurvived = { provider: 0, mcp: 0 };

    beforeAll(async () => {
      provider = await startProviderProcess(implementation.command);
    });
    afterAll(async () => {
      await server?.close();
      await provider?.stop();
      console.log(
        `${implementation.name}: survived ${faultsSurvived.provider} provider faults and ${faultsSurvived.mcp} MCP-hop faults`,
      );
    });

    const current = async (): Promise<ServerConnection> => {
      server ??= await connectToServer(args());
      return server;
    };
    const killServer = async () => {
      await server?.kill();
      server = undefined;
    };

    /** The client's loop: the same key until an answer that is not "retry". */
    async function untilAnswered(call: KeyedToolCall): Promise<CallToolResult> {
      for (let attempt = 1; attempt <= CLIENT_ATTEMPTS; attempt += 1) {
        try {
          const result = await callTool((await current()).client, call, { timeout: 10_000 });
          // A tool error that says the outcome is unknown asks for exactly this retry.
          if (!result.isError) return result;
          if (!textOf(result).includes('is unknown')) return result;
        } catch (error) {
          if (idempotencyErrorOf(error)?.type !== IdempotencyErrorType.inProgress) throw error;
        }
        await sleep(50);
      }
      throw new Error(`no answer after ${CLIENT_ATTEMPTS} attempts`);
    }

    async function run(charge: Charge): Promise<{ call: KeyedToolCall; answer: CallToolResult }> {
      const call = {
        name: 'charge_guarded',
        arguments: { amount: charge.amount },
        idempotencyKey: randomUUID(),
      };
      // The MCP hop's fault needs the provider's first answer held or slow; the random ones follow.
      if (charge.mcpFault === 'killedWhileHeld')
        await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
      if (charge.mcpFault === 'answerLost' || charge.mcpFault === 'killedAfterRecord')
        await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: 3 * IMPATIENT_MS });
      for (const fault of charge.providerFaults) await provider.queueFault({ path: '/charges', fault });
      faultsSurvived.provider += charge.providerFaults.length;
      faultsSurvived.mcp += charge.mcpFault === 'none' ? 0 : 1;

      const connection = await current();
      if (charge.mcpFault === 'killedWhileHeld') {
        const lost = callTool(connection.client, call).catch(() => undefined);
        await waitUntil(async () => (await provider.held()) === 1);
        await killServer();
        await lost;
        await provider.release();
      } else if (charge.mcpFault === 'answerLost' || charge.mcpFault === 'killedAfterRecord') {
        await callTool(connection.client, call, { timeout: IMPATIENT_MS }).catch(() => undefined);
        if (charge.mcpFault === 'killedAfterRecord') {
          await waitUntil(
            async () => (await connection.decisions()).some((d) => d.idempotencyKey === call.idempotencyKey),
            15_000,
          );
          await killServer();
        }
      }
      return { call, answer: await untilAnswered(call) };
    }

    it('commits every charge exactly once and answers each with its own commit', async () => {
      await fc.assert(
        fc.asyncProperty(programs, async (charges) => {
          for (const charge of charges) {
            // Each charge starts from a provider with no faults left queued by the last one.
            await provider.reset();
            const { answer } = await run(charge);
            // A replay consumes no fault, so some may be left queued: they did not happen. (One
            // more, harmless, fault answers how many are queued.)
            const queued = await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: 0 });
            faultsSurvived.provider -= queued - 1;
            const commits = await provider.commits();
            expect(commits.map((c) => c.amount)).toEqual([charge.amount]);
            expect(commits[0]?.idempotencyKey).toMatch(/^mcp_/);
            expect(textOf(answer)).toBe(`Charged ${charge.amount}. New balance: ${charge.amount}`);
          }
        }),
        { numRuns, endOnFailure: true },
      );
    }, 600_000);
  });
}

const [own, ...others] = PROVIDER_IMPLEMENTATIONS;
if (own) describeModel(own, 20);
for (const other of others) describeModel(other, 6);
