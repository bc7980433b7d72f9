// --- A payment provider process for tests, started by command ---
//
// Any process that follows docs/provider-wire.md can stand in for the provider, so a provider is
// named here by the command that starts it, not by its code: the same tests run against every
// entry of PROVIDER_IMPLEMENTATIONS. Each process listens on a free loopback port (`--port 0`),
// is waited for within a bound, and is killed with its whole process group when the test run
// ends, even if a test never got to stop it.

import { spawn } from 'node:child_process';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { createConnection } from 'node:net';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { waitUntil } from './bounds.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Bound on waiting for the listening line: a provider that takes longer is broken, not slow. */
const START_TIMEOUT_MS = 10_000;

/** Bound on every request. A held response is released well within it, or the test is broken. */
const REQUEST_TIMEOUT_MS = 10_000;

/** How long a process may take to exit after SIGTERM before it gets SIGKILL. */
const STOP_GRACE_MS = 5_000;

/** How much of a process's stderr is kept for error messages. */
const STDERR_TAIL_CHARS = 4_000;

export interface ProviderImplementation {
  name: string;
  /** The command and its own arguments; `--host`, `--port` and the options are appended. */
  command: string[];
}

/** Every provider the tests run against. Another implementation of the wire is one more line. */
export const PROVIDER_IMPLEMENTATIONS: ProviderImplementation[] = [
  {
    name: 'demo/payment-provider/api.ts',
    // Node itself with tsx's loader, not the tsx command: that wrapper relays a SIGTERM to its child
    // and, when the child has not acknowledged it within some 60 ms (a busy machine), kills it
    // and exits 143.
    command: [process.execPath, '--import', 'tsx', join(ROOT, 'demo', 'payment-provider', 'api.ts')],
  },
  // Written in Python from docs/provider-wire.md alone, by someone who had not read demo/payment-provider/api.ts.
  {
    name: 'an independent provider in Python',
    command: ['python3', join(ROOT, 'test', 'fixtures', 'provider', 'independent_provider.py')],
  },
];

export interface ProviderProcessOptions {
  /** `--latency-ms`: how long every charge and refund takes before it commits. */
  latencyMs?: number;
  /** `--key-retention-seconds`: how long a key's record is kept. */
  keyRetentionSeconds?: number;
}

/** An answer as the client saw it, nothing interpreted away. */
export interface ProviderResult {
  status: number;
  headers: IncomingHttpHeaders;
  /** The body's exact bytes. */
  raw: Buffer;
  /** The body parsed as JSON, or its text when it is not JSON. */
  body: unknown;
}

export interface RequestOptions {
  /** Sent as the `Idempotency-Key` header, even when empty. */
  key?: string;
  /** The body, sent as it is (so a test can send what no serializer would). */
  body?: string | Buffer;
  /** Send the body in chunks, without a Content-Length, as a streaming client would. */
  chunked?: boolean;
}

export type FaultKind =
  | 'drop-after-commit'
  | '502-before-commit'
  | '502-after-commit'
  | '500-before-commit'
  | 'garbage-after-commit'
  | 'hold-after-commit'
  | 'delay';

export interface FaultSpec {
  path: '/charges' | '/refunds';
  fault: FaultKind;
  count?: number;
  delayMs?: number;
}

const CommitSchema = z.object({
  seq: z.number().int().describe('1, 2, … in commit order'),
  id: z.string().describe('the id the operation answered with'),
  operation: z.enum(['charge', 'refund']),
  amount: z.number().int(),
  orderId: z.string().optional().describe('refunds only'),
  idempotencyKey: z.string().nullable().describe('the header as sent, or null without one'),
});
export type Commit = z.infer<typeof CommitSchema>;

export interface ProviderProcess {
  /** `http://127.0.0.1:PORT`, as the listening line gave it. */
  url: string;
  /** The process the command started, which leads its own process group. */
  pid: number;
  /** The last few thousand characters the process wrote to stderr. */
  stderr(): string;
  /** Any request, raw: for the bodies and headers the helpers below would not send. */
  request(method: string, path: string, options?: RequestOptions): Promise<ProviderResult>;
  charge(amount: number, key?: string): Promise<ProviderResult>;
  refund(orderId: string, amount: number, key?: string): Promise<ProviderResult>;
  balance(): Promise<number>;
  reset(): Promise<void>;
  commits(): Promise<Commit[]>;
  /** Queues a fault; resolves to the `queued` total the provider answers. */
  queueFault(fault: FaultSpec): Promise<number>;
  /** Answers every held response; resolves to how many there were. */
  release(): Promise<number>;
  held(): Promise<number>;
  /** SIGKILL, as a crash would; resolves once nothing accepts connections on the port. */
  kill(): Promise<void>;
  /** SIGTERM (SIGKILL after a grace period); resolves to the exit code. */
  stop(): Promise<number | null>;
}

const ListeningLine = z.object({ event: z.literal('listening'), url: z.string().regex(/^http:\/\/[^/]+$/) });

/**
 * Starts `command --host 127.0.0.1 --port 0 [options]` and waits for its listening line. Rejects,
 * with the process's stderr, if the line does not come within START_TIMEOUT_MS or is not the wire's.
 */
export async function startProviderProcess(
  command: string[],
  options: ProviderProcessOptions = {},
): Promise<ProviderProcess> {
  const [executable, ...commandArgs] = command;
  if (executable === undefined) throw new Error('a provider command needs at least an executable');
  const args = [...commandArgs, '--host', '127.0.0.1', '--port', '0'];
  if (options.latencyMs !== undefined) args.push('--latency-ms', String(options.latencyMs));
  if (options.keyRetentionSeconds !== undefined) {
    args.push('--key-retention-seconds', String(options.keyRetentionSeconds));
  }
  // Its own process group: a wrapper such as tsx runs the provider in a child of its own, and a
  // SIGKILL to the wrapper alone would leave that child listening.
  const child = spawn(executable, args, { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const { pid } = child;
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-STDERR_TAIL_CHARS);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let running = true;
  void exited.then(() => {
    running = false;
  });
  const signalGroup = (signal: NodeJS.Signals) => {
    if (pid === undefined) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // the group is already gone
    }
  };
  const killOnExit = () => signalGroup('SIGKILL');
  // A test run that dies before `stop` must not leave a provider behind.
  process.once('exit', killOnExit);

  const described = `${command.join(' ')} (pid ${pid})`;
  let url: string;
  try {
    url = await listeningUrl(child.stdout, exited, described, () => stderr);
  } catch (error) {
    signalGroup('SIGKILL');
    await exited;
    process.off('exit', killOnExit);
    throw error;
  }
  const port = Number(new URL(url).port);
  // A process that printed its listening line was spawned, and has a pid.
  if (pid === undefined) throw new Error(`${described} listens, yet has no pid`);

  const request = (method: string, path: string, requestOptions: RequestOptions = {}) =>
    send(url, method, path, requestOptions);
  const ok = async <T>(method: string, path: string, schema: z.ZodType<T>, body?: unknown): Promise<T> => {
    const result = await request(method, path, body === undefined ? {} : { body: JSON.stringify(body) });
    if (result.status !== 200) {
      throw new Error(`${method} ${path} answered ${result.status}: ${result.raw.toString()}`);
    }
    return schema.parse(result.body);
  };

  return {
    url,
    pid,
    stderr: () => stderr,
    request,
    charge: (amount, key) => request('POST', '/charges', { key, body: JSON.stringify({ amount }) }),
    refund: (orderId, amount, key) =>
      request('POST', '/refunds', { key, body: JSON.stringify({ orderId, amount }) }),
    balance: async () => (await ok('GET', '/balance', z.object({ balance: z.number().int() }))).balance,
    reset: async () => {
      await ok('POST', '/reset', z.object({ balance: z.literal(0) }));
    },
    commits: async () => (await ok('GET', '/commits', z.object({ commits: z.array(CommitSchema) }))).commits,
    queueFault: async (fault) =>
      (await ok('POST', '/faults', z.object({ queued: z.number().int() }), fault)).queued,
    release: async () => (await ok('POST', '/release', z.object({ released: z.number().int() }))).released,
    held: async () => (await ok('GET', '/held', z.object({ held: z.number().int() }))).held,
    kill: async () => {
      signalGroup('SIGKILL');
      await exited;
      process.off('exit', killOnExit);
      // The wrapper's exit does not prove its child is gone: wait until the port refuses.
      await waitUntil(async () => !(await accepts(port)), STOP_GRACE_MS);
    },
    stop: async () => {
      if (running) signalGroup('SIGTERM');
      const timer = setTimeout(() => signalGroup('SIGKILL'), STOP_GRACE_MS);
      const code = await exited;
      clearTimeout(timer);
      // A wrapper can exit before the provider it ran: make sure none of the group survives.
      signalGroup('SIGKILL');
      process.off('exit', killOnExit);
      return code;
    },
  };
}

/** The URL from the first stdout line; later lines are drained (the wire keeps stdout quiet). */
function listeningUrl(
  stdout: NodeJS.ReadableStream,
  exited: Promise<number | null>,
  described: string,
  stderr: () => string,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () =>
        reject(
          new Error(`${described} printed no listening line within ${START_TIMEOUT_MS} ms\n${stderr()}`),
        ),
      START_TIMEOUT_MS,
    );
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${described} exited with ${code} before listening\n${stderr()}`));
    });
    let first = true;
    createInterface({ input: stdout }).on('line', (line) => {
      if (!first) return;
      first = false;
      clearTimeout(timer);
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        parsed = undefined;
      }
      const listening = ListeningLine.safeParse(parsed);
      if (listening.success) resolve(listening.data.url);
      else reject(new Error(`${described} printed "${line}", not the listening line\n${stderr()}`));
    });
  });
}

/** One request on its own connection (no keep-alive), so a dropped socket affects only itself. */
function send(url: string, method: string, path: string, options: RequestOptions): Promise<ProviderResult> {
  const body = options.body === undefined ? undefined : Buffer.from(options.body);
  const headers: Record<string, string> = {};
  if (options.key !== undefined) headers['idempotency-key'] = options.key;
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    if (!options.chunked) headers['content-length'] = String(body.length);
  }
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.once('error', reject);
      res.once('end', () => {
        const raw = Buffer.concat(chunks);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, raw, body: jsonOrText(raw) });
      });
    });
    req.setTimeout(REQUEST_TIMEOUT_MS, () =>
      req.destroy(new Error(`${method} ${path} got no answer within ${REQUEST_TIMEOUT_MS} ms`)),
    );
    req.once('error', reject);
    if (body !== undefined && options.chunked) {
      // A few chunks, so the provider has to count what it reads rather than trust a header.
      const size = Math.ceil(body.length / 4);
      for (let start = 0; start < body.length; start += size) req.write(body.subarray(start, start + size));
      req.end();
    } else {
      req.end(body);
    }
  });
}

function jsonOrText(raw: Buffer): unknown {
  const text = raw.toString();
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** True if something on loopback `port` accepts a TCP connection now. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const done = (accepted: boolean) => {
      socket.destroy();
      resolve(accepted);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
