// --- The demo's tools, registrable on a server of either SDK line ---
//
// Both SDK lines' `registerTool` take zod schemas and a callback typed by them, but each wants a
// concrete schema type: so the registry has one method per input the demo's tools take (an
// amount, or nothing). server.ts registers through `scopedRegistry`, on the current line; the
// tests' v1 server (test/support/v1-server.ts) and their unguarded server register the same tools
// through registries of their own.

import { type McpServer, requireScopes } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { DemoScope } from './scopes.js';

export const amountInput = z.object({
  amount: z.number().int().positive().describe('Amount to charge, in minor units (cents)'),
});
export const noInput = z.object({});

/** What a demo tool answers: text for people, structured content for programs; a declined
 * charge, text alone, marked `isError`. (A type alias: both SDK lines type a tool result as a
 * Record.) */
export type DemoToolResult = {
  content: Array<{ type: 'text'; text: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
};

export interface ToolConfig<Input> {
  description: string;
  /** The OAuth scope a caller's token needs to call the tool. */
  scope: DemoScope;
  inputSchema: Input;
  outputSchema: z.ZodObject;
  annotations?: { readOnlyHint?: boolean; idempotentHint?: boolean; openWorldHint?: boolean };
}

/** Registers a demo tool on a server of either SDK line, by the input it takes. */
export interface ToolRegistry {
  withAmount(
    name: string,
    config: ToolConfig<typeof amountInput>,
    run: (args: z.infer<typeof amountInput>) => Promise<DemoToolResult>,
  ): void;
  withoutArguments(
    name: string,
    config: ToolConfig<typeof noInput>,
    run: () => Promise<DemoToolResult>,
  ): void;
}

/**
 * The current SDK line's registry: each tool's scope becomes the SDK's scope challenge, which runs
 * over HTTP before the dispatch, for executions and replays alike.
 */
export function scopedRegistry(mcp: McpServer): ToolRegistry {
  return {
    withAmount: (name, { scope, ...config }, run) =>
      void mcp.registerTool(name, { ...config, scopeChallenge: requireScopes(scope) }, run),
    withoutArguments: (name, { scope, ...config }, run) =>
      void mcp.registerTool(name, { ...config, scopeChallenge: requireScopes(scope) }, run),
  };
}
