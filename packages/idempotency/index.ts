// SEP-3182 request idempotency for MCP servers built on the TypeScript SDK: lift this folder
// into your server, register your tools, then install the guard with the adapter of your SDK
// line: `./sdk-v2.js` (@modelcontextprotocol/server 2.x) or `./sdk-v1.js`
// (@modelcontextprotocol/sdk 1.x). Neither is re-exported here, so a server pulls in one SDK.
// The Redis store is imported on its own (`./redis-store.js`) for the same reason: a server that
// keeps its records in memory, or in a store of its own, needs no Redis client.
// The client helpers (`./client.js`) are on @modelcontextprotocol/client 2.x. The OpenTelemetry
// figures (`./otel.js`) are on @opentelemetry/api, which a server that does not import them needs not.

export * from './claims-in-flight.js';
export * from './errors.js';
export * from './execution.js';
export * from './fingerprint.js';
export * from './guard.js';
export * from './key.js';
export * from './memory-store.js';
export * from './scope.js';
export * from './store.js';
