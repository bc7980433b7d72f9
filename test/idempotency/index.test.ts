// The package's main entry (index.ts), as a user imports it: `mcp-request-idempotency`. It gives a
// server the guard, the memory store, the errors and the defaults, and nothing that pulls in an SDK
// line or a database client, which live on subpaths of their own.

import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as entry from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** What a server builds on, besides its SDK adapter: a name gone from here breaks its imports. */
const PUBLIC_API = [
  // The guard, its options' defaults, and the store it needs.
  'createToolCallGuard',
  'DEFAULT_AWAITING_INPUT_RETENTION_MS',
  'DEFAULT_LEASE_MS',
  'DEFAULT_PROVIDER_KEY_RETENTION_MS',
  'DEFAULT_RETENTION_MS',
  'MemoryIdempotencyStore',
  'DEFAULT_MAX_BYTES',
  'DEFAULT_MAX_RECORDS',
  'DEFAULT_MAX_BYTES_PER_SCOPE',
  'DEFAULT_MAX_RECORDS_PER_SCOPE',
  'MAX_RETENTION_MS',
  'ClaimsInFlight',
  'StoreUnavailableError',
  // The capability, the key's rule and the equivalence.
  'IDEMPOTENCY_CAPABILITY',
  'MAX_IDEMPOTENCY_KEY_LENGTH',
  'checkIdempotencyKey',
  'fingerprintToolCall',
  // The errors, and reading them back.
  'IdempotencyErrorType',
  'INTERNAL_ERROR',
  'INVALID_PARAMS',
  'INVALID_REQUEST_STATE_REASON',
  'JsonRpcError',
  'MISSING_CLIENT_CAPABILITY',
  'Messages',
  'OUTCOME_META_KEY',
  'idempotencyError',
  'idempotencyErrorCode',
  'idempotencyErrorOf',
  'isMissingClientCapability',
  'isRefusedContinuation',
  'markedOutcomeUnknown',
  'outcomeUnknownData',
  'outcomeUnknownOf',
  'refusedContinuation',
  // The caller's scope.
  'LOCAL_SCOPE',
  'ScopeUnknownError',
  'issuerOf',
  'principalOf',
  'principalScope',
  'scopeWithin',
  // A tool's execution: its provider key, its outcome, its record's transaction.
  'LeaseRenewals',
  'ToolExecution',
  'aroundExecution',
  'continuationBinding',
  'currentExecution',
  'providerKey',
  'runExecution',
  'runUnkeyed',
];

describe('the main entry', () => {
  it('exports exactly the public API: nothing a server builds on goes missing, nothing new slips in unlisted', () => {
    expect(Object.keys(entry).sort()).toStrictEqual([...PUBLIC_API].sort());
  });

  it('leaves the SDK adapters, the database stores, the client and the agent adapters to their subpaths', () => {
    for (const name of [
      'installIdempotencyGuard',
      'verifyGuardSeesKeys',
      'SqliteIdempotencyStore',
      'RedisIdempotencyStore',
      'PostgresIdempotencyStore',
      'withIdempotencyKeys',
      'idempotencyKeyMiddleware',
    ])
      expect(Object.keys(entry)).not.toContain(name);
  });

  it('keeps its internals inside: the settings, the decision log and the continuation claim', () => {
    for (const name of ['guardSettings', 'DecisionLog', 'claimContinuation', 'guardToolsCallEntry'])
      expect(Object.keys(entry)).not.toContain(name);
  });

  // A module hook that prints every package resolved from node_modules while a module loads; the
  // v2 adapter's subpath is loaded too, to show the hook sees what an entry pulls in.
  const loads = async (module: string): Promise<string[]> => {
    const hook = `export async function resolve(s, c, n) { const r = await n(s, c); if (r.url.includes('/node_modules/')) console.log(r.url.split('/node_modules/').pop().split('/').slice(0, 2).join('/')); return r; }`;
    const script = `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)})); await import(${JSON.stringify(join(ROOT, module))});`;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      {
        cwd: ROOT,
      },
    );
    return [...new Set(stdout.trim().split('\n').filter(Boolean))];
  };

  it('loads no package at all: no SDK line, no database client, no zod', async () => {
    expect(await loads('packages/idempotency/index.ts')).toStrictEqual([]);
    expect(await loads('packages/idempotency/sdk/v2.ts')).toContain('@modelcontextprotocol/server');
  });
});
