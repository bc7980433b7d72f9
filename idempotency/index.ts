// SEP-3182 request idempotency for MCP servers built on the TypeScript SDK: lift this folder
// into your server, register your tools, then call `installIdempotencyGuard`.
// The Redis store is imported on its own (`./redis-store.js`), so a server that keeps its
// records in memory, or in a store of its own, needs no Redis client.

export * from './claims-in-flight.js';
export * from './client.js';
export * from './errors.js';
export * from './fingerprint.js';
export * from './guard.js';
export * from './key.js';
export * from './memory-store.js';
export type { RawRequestHandler, ToolCallExtra } from './sdk-internals.js';
export * from './self-check.js';
export * from './store.js';
