// The demo's tools on a server of the v1 SDK line (@modelcontextprotocol/sdk 1.32, protocol up to
// 2025-11-25), guarded by the v1 adapter and served over stdio: what a server author who has not
// moved to the current SDK lifts the guard into. The shared SEP cases run against it too.
//
// Usage: tsx test/support/v1-server.ts [--charge-latency-ms N] [--max-records N] …
// (the memory-store options of server.ts; stdio only).

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { installIdempotencyGuard, verifyGuardSeesKeys } from 'mcp-request-idempotency/sdk-v1';
import { parseServerArgs } from '../../demo/hosting/cli.js';
import { batchDecisionLines, logDecision } from '../../demo/hosting/log.js';
import type { ToolRegistry } from '../../demo/hosting/tool-registry.js';
import { MemoryLedger } from '../../ledger.js';
import { registerDemoTools, SERVER_INFO } from '../../server.js';

const config = parseServerArgs(process.argv.slice(2));
batchDecisionLines(config.logFlushMs);
await verifyGuardSeesKeys();

const store = new MemoryIdempotencyStore({ maxRecords: config.maxRecords });
const mcp = new McpServer(SERVER_INFO);
// Over stdio there is no token, so no scope to check: the tools' scopes are not registered.
const tools: ToolRegistry = {
  withAmount: (name, { scope: _scope, ...toolConfig }, run) => void mcp.registerTool(name, toolConfig, run),
  withoutArguments: (name, { scope: _scope, ...toolConfig }, run) =>
    void mcp.registerTool(name, toolConfig, run),
};
registerDemoTools(tools, new MemoryLedger(config.chargeLatencyMs), store);
installIdempotencyGuard(mcp, {
  store,
  retentionMs: config.retentionMs,
  leaseMs: config.leaseMs,
  onDecision: logDecision,
});
await mcp.connect(new StdioServerTransport());
