// mcp-request-idempotency: SEP-3182 request idempotency for MCP servers on the TypeScript SDK.
// Register your tools, then install the guard with the adapter of your SDK line:
// `mcp-request-idempotency/sdk-v2` (@modelcontextprotocol/server 2.x) or
// `mcp-request-idempotency/sdk-v1` (@modelcontextprotocol/sdk 1.x). Neither is re-exported here,
// so a server pulls in one SDK. The SQLite, Redis and Postgres stores are subpaths of their own
// (`/sqlite`, `/redis`, `/postgres`) for the same reason: a server that keeps its records in memory,
// or in a store of its own, installs no database client. The client helpers (`/client`) are on
// @modelcontextprotocol/client 2.x. The OpenTelemetry figures (`/otel`) are on @opentelemetry/api,
// which a server that does not import them needs not install.

export { IDEMPOTENCY_CAPABILITY } from './core/capability.js';
export type { Decision, DecisionEvent } from './core/decisions.js';
export * from './core/errors.js';
export type { Dispatch } from './core/execution.js';
export * from './core/execution.js';
export { type Fingerprint, type FingerprintResult, fingerprintToolCall } from './core/fingerprint.js';
export { createToolCallGuard, type ToolCallGuard } from './core/guard.js';
export * from './core/key.js';
export {
  DEFAULT_AWAITING_INPUT_RETENTION_MS,
  DEFAULT_LEASE_MS,
  DEFAULT_PROVIDER_KEY_RETENTION_MS,
  DEFAULT_RETENTION_MS,
  type IdempotencyGuardOptions,
} from './core/options.js';
export * from './core/scope.js';
export * from './stores/claims-in-flight.js';
export * from './stores/contract.js';
export * from './stores/memory.js';
