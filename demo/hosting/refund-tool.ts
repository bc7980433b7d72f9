// --- A tool that asks before it acts: a multi-round-trip call (2026-07-28) ---
//
// `refund_order` answers its opening round with `input_required`: a question for the user, and a
// sealed `requestState` naming the refund. The client sends the call again with the answer (a
// continuation) and only a yes refunds. On a 2025-11-25 connection the SDK asks the question
// itself, inside the one call. Like the others, this tool carries no idempotency logic: the
// guard's rules for continuations are in packages/idempotency/core/guard.ts, and the seal binds a
// state to the idempotency key of the round that minted it (request-state.ts), so one yes is one
// refund: carried to another key, or sent with none, it is refused before this runs.

import {
  acceptedContent,
  inputRequired,
  inputResponse,
  type McpServer,
  type RequestStateCodec,
  requireScopes,
  type ServerContext,
} from '@modelcontextprotocol/server';
import { providerKey } from 'mcp-request-idempotency';
import { z } from 'zod';
import type { Ledger } from '../../ledger.js';
import { requestStateCodec } from './request-state.js';
import { DEMO_SCOPES } from './scopes.js';

/** What `refund_order` seals into its `requestState`: the refund the question was about. */
export interface RefundState {
  tool: 'refund_order';
  orderId: string;
  amount: number;
}

let processCodec: RequestStateCodec<RefundState> | undefined;

/** A codec with a key of this process's own: enough when one process serves every round. */
export function processRequestStateCodec(): RequestStateCodec<RefundState> {
  processCodec ??= requestStateCodec<RefundState>(crypto.getRandomValues(new Uint8Array(32)));
  return processCodec;
}

const refundInput = z.object({
  orderId: z.string().min(1).max(64).describe('The order to refund'),
  amount: z.number().int().positive().describe('Amount to refund, in minor units (cents)'),
});
const refundOutput = z.object({
  orderId: z.string(),
  refunded: z.number().int().describe('The amount this call refunded: 0 when the user said no'),
  balance: z.number().int().describe('The ledger balance after the call'),
});
const confirmation = z.object({ confirm: z.boolean().describe('Refund this order?') });

export function registerRefundTool(
  mcp: McpServer,
  ledger: Ledger,
  codec: RequestStateCodec<RefundState>,
): void {
  mcp.registerTool(
    'refund_order',
    {
      description: 'Refund an order, after asking the user to confirm (a multi-round-trip call).',
      inputSchema: refundInput,
      outputSchema: refundOutput,
      annotations: { readOnlyHint: false, idempotentHint: false, openWorldHint: true },
      scopeChallenge: requireScopes(DEMO_SCOPES.refund),
    },
    async ({ orderId, amount }, ctx: ServerContext) => {
      // Verified by the SDK before this runs (`requestState.verify`): integrity, expiry, caller, key.
      const state = ctx.mcpReq.requestState<RefundState>();
      const answers = ctx.mcpReq.inputResponses;
      // Only an answer to this refund's own question counts.
      const ours = state?.tool === 'refund_order' && state.orderId === orderId && state.amount === amount;
      const given = ours ? answers : undefined;
      const answer = inputResponse(given, 'confirm');
      const content = acceptedContent(given, 'confirm', confirmation);
      if (answer.kind !== 'elicit' || (answer.action === 'accept' && content === undefined)) {
        // The opening round, or an answer this refund cannot use (another refund's state, a
        // malformed answer): ask. The SDK's way with an unusable answer is to ask again.
        const again = state !== undefined || answers !== undefined;
        const question = `Refund ${amount} to order ${orderId}?`;
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: again ? `That answer could not be used. ${question}` : question,
              requestedSchema: confirmation,
            }),
          },
          requestState: await codec.mint({ tool: 'refund_order', orderId, amount }, ctx),
        });
      }
      if (content?.confirm !== true) {
        const balance = await ledger.balance();
        return {
          content: [{ type: 'text', text: `Not refunded: the user said no. Balance: ${balance}` }],
          structuredContent: { orderId, refunded: 0, balance },
        };
      }
      const balance = await ledger.refund(amount, { orderId, idempotencyKey: providerKey('refund') });
      return {
        content: [{ type: 'text', text: `Refunded ${amount} to order ${orderId}. New balance: ${balance}` }],
        structuredContent: { orderId, refunded: amount, balance },
      };
    },
  );
}
