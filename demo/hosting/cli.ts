// --- The demo server's command line: every flag, checked, with the usage that explains it ---
//
// `parseServerArgs` turns argv into a `ServerConfig`, refusing a bad value with a message that
// names its flag; `readCommandLine` is how `server.ts` reads it: `--help` answers the usage, and a
// mistake is one line on stderr and exit code 2, never a stack.

import { parseArgs } from 'node:util';
import {
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_BYTES_PER_SCOPE,
  DEFAULT_MAX_RECORDS,
  DEFAULT_MAX_RECORDS_PER_SCOPE,
  DEFAULT_PROVIDER_KEY_RETENTION_MS,
  DEFAULT_RETENTION_MS,
} from 'mcp-request-idempotency';
import { DEFAULT_SQLITE_SYNCHRONOUS, type SqliteSynchronous } from 'mcp-request-idempotency/sqlite';
import { DEFAULT_PROVIDER_TIMEOUT_MS } from './ledgers/provider.js';
import { DEFAULT_LOG_FLUSH_MS } from './log.js';

const STORE_KINDS = ['memory', 'sqlite', 'redis', 'postgres'] as const;
export type StoreKind = (typeof STORE_KINDS)[number];

export interface ServerConfig {
  transport: 'stdio' | 'http';
  host: string;
  /** The names a request's Host (and a page's Origin) may carry; unset, what `host` answers to. */
  allowedHosts: string[] | undefined;
  port: number;
  store: StoreKind;
  /** Where the balance lives: the store's own kind by default, or in this process. */
  ledger: StoreKind;
  postgresUrl: string | undefined;
  postgresPrefix: string;
  /** The SQLite file of `--store sqlite`: the records, and the balance beside them. */
  sqlitePath: string | undefined;
  /** What a SQLite commit survives: a process crash (`normal`), or a power loss too (`full`). */
  sqliteSynchronous: SqliteSynchronous;
  redisUrl: string;
  /** Seed nodes of a Redis Cluster: when set, the store and the ledger use it, not `redisUrl`. */
  redisCluster: string[] | undefined;
  redisPrefix: string;
  /** A payment provider over HTTP (docs/provider-wire.md); unset: the in-process ledger. */
  providerUrl: URL | undefined;
  /** Whether the tools' provider keys are sent: `none` shows the window they close. */
  providerKeys: 'derived' | 'none';
  providerTimeoutMs: number;
  /** How long the provider keeps a key: the records are kept at least as long. */
  providerKeyRetentionMs: number;
  chargeLatencyMs: number;
  retentionMs: number;
  maxRecords: number;
  maxRecordsPerCaller: number;
  maxBytesPerCaller: number;
  leaseMs: number;
  logFlushMs: number;
  /** Where Prometheus scrapes the guard's figures (`/metrics` on `host`); unset, no such server. */
  metricsPort: number | undefined;
}

const USAGE = `Usage: npm start -- [options]   (or node --import tsx server.ts [options])
  --http                    serve stateless Streamable HTTP at /mcp instead of stdio
  --host H                  host of the HTTP and metrics listeners (default 127.0.0.1)
  --allowed-hosts NAME,NAME…  the names a request's Host may carry, and a browser page's Origin
                            (DNS-rebinding protection). Default: what --host answers to (a loopback
                            address: the loopback names); a wildcard --host (0.0.0.0, ::) checks
                            no names unless given these, e.g. the name a load balancer serves
  --port N                  HTTP port (default 3000; 0 picks a free one)
  --store memory|sqlite|redis|postgres  where idempotency records live (default memory)
  --ledger memory|sqlite|redis|postgres  where the balance lives (default: beside the records). With
                            sqlite or postgres, each keyed charge commits in its record's transaction
  --sqlite-path FILE        the SQLite file of --store sqlite (created if missing), which outlives the
                            process: a stdio server restarted on it replays what it answered
  --sqlite-synchronous normal|full  what a SQLite commit survives (default normal): a process crash;
                            full: a power loss too, at an fsync per write
  --postgres-url URL        default $DATABASE_URL (needs --store postgres)
  --postgres-prefix P       prefix of every table this server creates (default sep3182_)
  --redis-url URL           default $REDIS_URL, else redis://127.0.0.1:6379
  --redis-cluster URL,URL…  a Redis Cluster instead: some of its nodes' URLs (needs --store redis)
  --redis-prefix P          prefix of every Redis key this server writes (default sep3182:)
  --provider-url URL        charge a payment provider over HTTP (demo/payment-provider/api.ts, or any that follows
                            docs/provider-wire.md), with an Idempotency-Key derived from the MCP call;
                            unset: the in-process ledger, the provider that takes no keys
  --provider-keys derived|none  send the derived key to the provider (default derived), or none,
                            to show the window the key closes
  --provider-timeout-ms N   how long one provider request may take (default ${DEFAULT_PROVIDER_TIMEOUT_MS})
  --provider-key-retention-seconds N  how long the provider keeps a key (default
                            ${DEFAULT_PROVIDER_KEY_RETENTION_MS / 1000}); --retention-seconds may not be shorter
  --charge-latency-ms N     the in-process ledger takes N ms per charge (default 0)
  --retention-seconds N     how long a completed key is remembered (default ${DEFAULT_RETENTION_MS / 1000})
  --max-records N           cap on records in the memory store (default ${DEFAULT_MAX_RECORDS})
  --max-records-per-caller N  quota of live records per caller, every store (default ${DEFAULT_MAX_RECORDS_PER_SCOPE})
  --max-bytes-per-caller N    quota of stored response characters per caller (default ${DEFAULT_MAX_BYTES_PER_SCOPE})
  --in-progress-lease-ms N  how long an unfinished claim holds its key (default ${DEFAULT_LEASE_MS})
  --log-flush-ms N          how long a decision log line may wait to be written with others
                            (default ${DEFAULT_LOG_FLUSH_MS}; 0 writes each at once)
  --metrics-port N          serve the guard's figures as Prometheus text at http://HOST:N/metrics
                            (0 picks a free one; the log's "metrics" line says where); unset, none
Environment: DEMO_BEARER_TOKENS requires bearer auth over HTTP: comma-separated principal:token
  (every scope but admin) or principal:token:scope+scope, e.g.
  "alice:token-a,alice:token-r:read,bob:token-b,ops:token-o:admin".
  Scopes: charge, refund, read, admin (charge_* need charge, refund_order refund,
  get_balance read, reset_ledger admin: an operator's, which clears every caller's records).
  DEMO_REQUEST_STATE_KEY seals refund_order's requestState (at least 32 characters); every HTTP
  instance a continuation may reach needs the same one. Unset: a random key of this process's own.
  OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / …_METRICS_ENDPOINT) sends
  traces and metrics over OTLP/HTTP, with the OTEL_* settings the exporters read (docs/operations.md).`;

export function parseServerArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const { values } = parseArgs({
    args: negativeNumbersAsValues(argv),
    strict: true,
    options: {
      http: { type: 'boolean', default: false },
      host: { type: 'string' },
      'allowed-hosts': { type: 'string' },
      port: { type: 'string' },
      store: { type: 'string', default: 'memory' },
      'redis-url': { type: 'string' },
      'redis-cluster': { type: 'string' },
      'redis-prefix': { type: 'string' },
      ledger: { type: 'string' },
      'postgres-url': { type: 'string' },
      'postgres-prefix': { type: 'string' },
      'sqlite-path': { type: 'string' },
      'sqlite-synchronous': { type: 'string' },
      'provider-url': { type: 'string' },
      'provider-keys': { type: 'string' },
      'provider-timeout-ms': { type: 'string' },
      'provider-key-retention-seconds': { type: 'string' },
      'charge-latency-ms': { type: 'string', default: '0' },
      'retention-seconds': { type: 'string', default: String(DEFAULT_RETENTION_MS / 1000) },
      'max-records': { type: 'string', default: String(DEFAULT_MAX_RECORDS) },
      'max-records-per-caller': { type: 'string', default: String(DEFAULT_MAX_RECORDS_PER_SCOPE) },
      'max-bytes-per-caller': { type: 'string', default: String(DEFAULT_MAX_BYTES_PER_SCOPE) },
      'in-progress-lease-ms': { type: 'string', default: String(DEFAULT_LEASE_MS) },
      'log-flush-ms': { type: 'string', default: String(DEFAULT_LOG_FLUSH_MS) },
      'metrics-port': { type: 'string' },
    },
  });
  const store = storeKind('--store', values.store);
  const providerGiven = values['provider-url'] !== undefined;
  refuseWithoutEffect([
    ['--port', values.port, '--http', values.http],
    ['--host', values.host, '--http or --metrics-port', values.http || values['metrics-port'] !== undefined],
    ['--redis-url', values['redis-url'], '--store redis', store === 'redis'],
    ['--redis-prefix', values['redis-prefix'], '--store redis', store === 'redis'],
    ['--postgres-prefix', values['postgres-prefix'], '--store postgres', store === 'postgres'],
    ['--provider-keys', values['provider-keys'], '--provider-url', providerGiven],
    ['--provider-timeout-ms', values['provider-timeout-ms'], '--provider-url', providerGiven],
    [
      '--provider-key-retention-seconds',
      values['provider-key-retention-seconds'],
      '--provider-url',
      providerGiven,
    ],
  ]);
  const host = values.host ?? '127.0.0.1';
  const redisUrl = values['redis-url'] ?? env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const ledger = storeKind('--ledger', values.ledger ?? store);
  // The balance beside the records, or in this process; a ledger in one store and records in
  // another would share nothing a transaction could span.
  if (ledger !== store && ledger !== 'memory')
    throw new Error(`--ledger ${ledger} needs --store ${ledger} (the balance lives beside the records)`);
  const postgresUrl = values['postgres-url'] ?? env.DATABASE_URL;
  if (store === 'postgres' && !postgresUrl)
    throw new Error('--store postgres needs --postgres-url or $DATABASE_URL');
  if (store === 'postgres' && postgresUrl) {
    const from = values['postgres-url'] === undefined ? 'DATABASE_URL' : '--postgres-url';
    storeUrl(from, postgresUrl, ['postgres:', 'postgresql:']);
  }
  if (values['postgres-url'] !== undefined && store !== 'postgres')
    throw new Error('--postgres-url needs --store postgres');
  const sqlitePath = values['sqlite-path'];
  if (store === 'sqlite' && (sqlitePath === undefined || sqlitePath === ''))
    throw new Error('--store sqlite needs --sqlite-path FILE (the file its records outlive the process in)');
  if (sqlitePath !== undefined && store !== 'sqlite') throw new Error('--sqlite-path needs --store sqlite');
  const sqliteSynchronous = values['sqlite-synchronous'] ?? DEFAULT_SQLITE_SYNCHRONOUS;
  if (sqliteSynchronous !== 'normal' && sqliteSynchronous !== 'full')
    throw new Error(`--sqlite-synchronous must be normal or full, got "${sqliteSynchronous}"`);
  if (values['sqlite-synchronous'] !== undefined && store !== 'sqlite')
    throw new Error('--sqlite-synchronous needs --store sqlite');
  const redisCluster = values['redis-cluster']?.split(',');
  if (redisCluster && store !== 'redis') throw new Error('--redis-cluster needs --store redis');
  if (redisCluster?.some((url) => url === ''))
    throw new Error(`--redis-cluster takes comma-separated URLs, got "${values['redis-cluster']}"`);
  // Named as the user gave it: a flag, or the variable the URL came from.
  const redisFrom = redisCluster
    ? '--redis-cluster'
    : values['redis-url'] === undefined && env.REDIS_URL !== undefined
      ? 'REDIS_URL'
      : '--redis-url';
  if (store === 'redis')
    for (const url of redisCluster ?? [redisUrl]) storeUrl(redisFrom, url, ['redis:', 'rediss:']);
  const providerUrl = values['provider-url'] === undefined ? undefined : httpUrl(values['provider-url']);
  const providerKeys = values['provider-keys'] ?? 'derived';
  if (providerKeys !== 'derived' && providerKeys !== 'none')
    throw new Error(`--provider-keys must be derived or none, got "${providerKeys}"`);
  const chargeLatencyMs = integerOption('--charge-latency-ms', values['charge-latency-ms'], 0);
  if (providerUrl && values.ledger !== undefined)
    throw new Error('--provider-url is the ledger: give --ledger or --provider-url, not both');
  if (providerUrl && chargeLatencyMs > 0)
    throw new Error("--charge-latency-ms is the in-process ledger's; give the provider its own --latency-ms");
  const retentionSeconds = integerOption('--retention-seconds', values['retention-seconds'], 1);
  const providerKeyRetentionSeconds = integerOption(
    '--provider-key-retention-seconds',
    values['provider-key-retention-seconds'] ?? String(DEFAULT_PROVIDER_KEY_RETENTION_MS / 1000),
    1,
  );
  // The guard's rule (DEFAULT_RETENTION_MS says why), said at start-up in the flags' words.
  if (providerUrl && providerKeys === 'derived' && retentionSeconds < providerKeyRetentionSeconds) {
    throw new Error(
      `--retention-seconds ${retentionSeconds} is shorter than the provider keeps keys ` +
        `(--provider-key-retention-seconds ${providerKeyRetentionSeconds}): a key reused once its record ` +
        'is gone would be answered the old charge; keep records at least as long',
    );
  }
  const port = integerOption('--port', values.port ?? String(DEFAULT_PORT), 0, MAX_PORT);
  const metricsPort =
    values['metrics-port'] === undefined
      ? undefined
      : integerOption('--metrics-port', values['metrics-port'], 0, MAX_PORT);
  if (values.http && metricsPort !== undefined && metricsPort !== 0 && metricsPort === port)
    throw new Error(`--metrics-port ${metricsPort} is the --port: give the metrics a port of their own`);
  const allowedHosts = values['allowed-hosts'] === undefined ? undefined : hostNames(values['allowed-hosts']);
  if (allowedHosts && !values.http) throw new Error('--allowed-hosts needs --http');
  return {
    transport: values.http ? 'http' : 'stdio',
    host,
    allowedHosts,
    port,
    store,
    redisUrl,
    redisCluster,
    redisPrefix: values['redis-prefix'] ?? 'sep3182:',
    ledger,
    postgresUrl,
    postgresPrefix: values['postgres-prefix'] ?? 'sep3182_',
    sqlitePath,
    sqliteSynchronous,
    providerUrl,
    providerKeys,
    providerTimeoutMs: integerOption(
      '--provider-timeout-ms',
      values['provider-timeout-ms'] ?? String(DEFAULT_PROVIDER_TIMEOUT_MS),
      1,
    ),
    providerKeyRetentionMs: 1000 * providerKeyRetentionSeconds,
    chargeLatencyMs,
    retentionMs: 1000 * retentionSeconds,
    maxRecords: integerOption('--max-records', values['max-records'], 1),
    maxRecordsPerCaller: integerOption('--max-records-per-caller', values['max-records-per-caller'], 1),
    maxBytesPerCaller: integerOption('--max-bytes-per-caller', values['max-bytes-per-caller'], 1),
    leaseMs: integerOption('--in-progress-lease-ms', values['in-progress-lease-ms'], 1),
    logFlushMs: integerOption('--log-flush-ms', values['log-flush-ms'], 0),
    metricsPort,
  };
}

/** The HTTP port without `--port`. */
const DEFAULT_PORT = 3000;

/**
 * Refuses a flag given without the one it takes effect with (`--port` over stdio would be
 * ignored, and stdio would start), on one line naming both: [flag, its value, what it needs, met].
 */
function refuseWithoutEffect(flags: ReadonlyArray<[string, unknown, string, boolean]>): void {
  for (const [flag, value, needed, met] of flags)
    if (value !== undefined && !met) throw new Error(`${flag} needs ${needed}`);
}

function storeKind(name: string, raw: string): StoreKind {
  const kind = STORE_KINDS.find((k) => k === raw);
  if (!kind) throw new Error(`${name} must be ${STORE_KINDS.join(', ')}, got "${raw}"`);
  return kind;
}

function httpUrl(raw: string): URL {
  const url = URL.canParse(raw) ? new URL(raw) : undefined;
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:')
    throw new Error(`--provider-url must be an http(s) URL, got "${raw}"`);
  return url;
}

/** Host names as a Host header carries them without its port: lower case, IPv6 in brackets. */
function hostNames(raw: string): string[] {
  return raw.split(',').map((name) => {
    const url = URL.canParse(`http://${name}`) ? new URL(`http://${name}`) : undefined;
    if (!url || name === '' || /[/@?#]/.test(name) || url.port !== '')
      throw new Error(`--allowed-hosts takes comma-separated host names without ports, got "${raw}"`);
    return url.hostname;
  });
}

/**
 * A store URL the store's client can parse, of its scheme. Echoed with what precedes an `@` left
 * out, as that may be a password; a URL without a scheme is answered the one it likely meant.
 */
function storeUrl(name: string, raw: string, protocols: readonly string[]): void {
  const url = URL.canParse(raw) ? new URL(raw) : undefined;
  if (url && protocols.includes(url.protocol)) return;
  const at = raw.lastIndexOf('@');
  const shown = at === -1 ? raw : `…${raw.slice(at)}`;
  const meant = raw.includes('//') ? '' : ` (${protocols[0]}//${shown}?)`;
  throw new Error(
    `${name} must be a ${protocols.map((p) => `${p}//`).join(' or ')} URL, got "${shown}"${meant}`,
  );
}

/** The highest TCP port. */
const MAX_PORT = 65_535;

function integerOption(name: string, raw: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
    throw new Error(`${name} must be an integer ${range}, got "${raw}"`);
  }
  return value;
}

/**
 * `--retention-seconds -5` as `--retention-seconds=-5`: parseArgs takes a value that starts with
 * a dash for an option of its own ("argument is ambiguous"), where the mistake is the number,
 * which `integerOption` then names.
 */
function negativeNumbersAsValues(argv: readonly string[]): string[] {
  const joined: string[] = [];
  for (const arg of argv) {
    const option = joined.at(-1);
    if (/^-\d/.test(arg) && option?.startsWith('--') && !option.includes('='))
      joined[joined.length - 1] = `${option}=${arg}`;
    else joined.push(arg);
  }
  return joined;
}

/**
 * Said when the stdio server's stdin is a terminal: it waits there for JSON-RPC from an MCP
 * client, which a person at the terminal would take for a hang.
 */
export const STDIO_AT_A_TERMINAL =
  'Serving MCP over stdio: this waits for JSON-RPC on stdin, from an MCP client that starts it (Ctrl-C stops it). Over HTTP: npm start -- --http; every option: npm start -- --help';

/**
 * The command line and what the environment adds to it (`environment`: the tokens, the
 * `requestState` key), or the process ends: `--help` prints the usage (stdout, success, not a
 * complaint about an unknown option); a mistake prints its first line, which names the option.
 */
export function readCommandLine<T>(
  argv: string[],
  env: NodeJS.ProcessEnv,
  environment: (env: NodeJS.ProcessEnv) => T,
): T & { config: ServerConfig } {
  if (argv.some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  try {
    const added = environment(env);
    const config = parseServerArgs(argv, env);
    if (config.transport === 'stdio' && process.stdin.isTTY) process.stderr.write(`${STDIO_AT_A_TERMINAL}\n`);
    return { ...added, config };
  } catch (error) {
    // parseArgs' own messages run to three lines; the first names the option.
    const [mistake] = messageOf(error).split('\n');
    process.stderr.write(`${mistake} (--help lists the options)\n`);
    process.exit(2);
  }
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
