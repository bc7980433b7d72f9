// --- A Redis server for tests ---
//
// If `redis-server` is installed, each test file gets a private one on a free loopback port,
// with persistence off, which it can also kill, freeze and restart (the fail-closed tests
// need that), so every Redis test runs. Otherwise `REDIS_URL`, if set, is shared: tests only
// touch keys under their own unique prefix, and the ones that must crash Redis skip. With
// neither, `startRedis` returns undefined and the file skips its Redis tests, saying why.
// A cluster of them is redis-cluster.ts; the commands one receives, redis-commands.ts.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createClient, type RedisClientType } from '@redis/client';
import { START_TIMEOUT_MS, sleep, WAIT_MS, waitUntil } from './bounds.js';

export const REDIS_SKIP_REASON = 'Redis tests skipped: set REDIS_URL or install redis-server';

export interface TestRedis {
  url: string;
  /** True when this helper started the server: only then may a test kill, freeze or restart it. */
  owned: boolean;
  /** An admin connection for looking behind a store's back (PTTL, EXISTS, INFO). */
  admin: RedisClientType;
  /** Deletes every key under `prefix` and nothing else (SCAN + UNLINK; never FLUSHALL). */
  flush(prefix: string): Promise<void>;
  /** SIGKILL, as a crash would; resolves once the process is gone. Owned servers only. */
  kill(): Promise<void>;
  /** Starts a killed server again on the same port, and waits until it answers PING. */
  restart(): Promise<void>;
  /** SIGSTOP: the port stays open but nothing answers, as with a hung Redis. */
  freeze(): void;
  /** SIGCONT after `freeze`. */
  thaw(): void;
  /** Closes the admin connection and stops the server if this helper started it. */
  stop(): Promise<void>;
}

/** A key prefix no other test file or run shares, even on a shared `REDIS_URL`. */
export function uniqueKeyPrefix(label: string): string {
  return `sep3182-test:${label}:${process.pid}-${randomUUID().slice(0, 8)}:`;
}

export interface RedisOptions {
  /**
   * More `redis-server` arguments, after the defaults (so they win): the environment a test puts
   * the store in (`--maxmemory-policy allkeys-lru`, `--rename-command CONFIG ""`). A server started
   * with them is always a private one: a shared `REDIS_URL` is not theirs to change, so then the
   * answer is undefined.
   */
  args?: readonly string[];
}

export async function startRedis(options: RedisOptions = {}): Promise<TestRedis | undefined> {
  const binary = findOnPath('redis-server');
  const shared = process.env.REDIS_URL;
  if (!binary) return shared && !options.args ? withAdmin(shared, undefined) : undefined;
  const server = await PrivateRedis.start(binary, { args: options.args });
  try {
    return await withAdmin(server.url, server);
  } catch (error) {
    await server.stop();
    throw error;
  }
}

export async function withAdmin(url: string, server: PrivateRedis | undefined): Promise<TestRedis> {
  const admin: RedisClientType = createClient({
    url,
    // Reconnects quickly after the fail-closed tests restart the server.
    socket: { connectTimeout: WAIT_MS, reconnectStrategy: 50 },
  });
  admin.on('error', () => {}); // expected while a test has the server down
  try {
    await withDeadline(admin.connect(), `Redis at ${url} did not answer`);
  } catch (error) {
    admin.destroy(); // or it would keep reconnecting after the test gave up
    throw error;
  }

  const owned = (): PrivateRedis => {
    if (!server) throw new Error('only a redis-server started by the test can be stopped or frozen');
    return server;
  };
  return {
    url,
    owned: server !== undefined,
    admin,
    async flush(prefix) {
      for await (const keys of admin.scanIterator({ MATCH: `${escapeGlob(prefix)}*`, COUNT: 1000 })) {
        if (keys.length > 0) await admin.unlink(keys);
      }
    },
    kill: () => owned().kill(),
    restart: async () => {
      await owned().restart();
      await waitUntil(async () => admin.isReady);
    },
    freeze: () => owned().signal('SIGSTOP'),
    thaw: () => owned().signal('SIGCONT'),
    async stop() {
      admin.destroy();
      await server?.stop();
    },
  };
}

export class PrivateRedis {
  private child: ReturnType<typeof spawn> | undefined;
  private output = '';
  private readonly killOnExit = () => this.child?.kill('SIGKILL');

  private constructor(
    private readonly binary: string,
    readonly port: number,
    private readonly dir: string,
    /** After the defaults below, so they win (a cluster node's settings, persistence). */
    private readonly extraArgs: readonly string[] = [],
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(
    binary: string,
    { port, args }: { port?: number; args?: readonly string[] } = {},
  ): Promise<PrivateRedis> {
    const dir = await mkdtemp(join(tmpdir(), 'sep3182-redis-'));
    const server = new PrivateRedis(binary, port ?? (await freePort()), dir, args);
    // A test run that dies before `stop` must not leave a redis-server behind.
    process.once('exit', server.killOnExit);
    try {
      await server.launch();
    } catch (error) {
      await server.stop();
      throw error;
    }
    return server;
  }

  async restart(): Promise<void> {
    if (this.child) throw new Error('redis-server is still running; kill it first');
    await this.launch();
  }

  async kill(): Promise<void> {
    await this.terminate('SIGKILL');
  }

  signal(signal: NodeJS.Signals): void {
    this.child?.kill(signal);
  }

  async stop(): Promise<void> {
    this.signal('SIGCONT'); // a frozen server cannot act on SIGTERM
    await this.terminate('SIGTERM');
    process.off('exit', this.killOnExit);
    await rm(this.dir, { recursive: true, force: true });
  }

  private async launch(): Promise<void> {
    // Loopback only, nothing written to disk, logs kept for the error message.
    const child = spawn(
      this.binary,
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.dir,
        ...this.extraArgs,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.child = child;
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString()).slice(-4000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('exit', () => {
      if (this.child === child) this.child = undefined;
    });
    try {
      await waitUntil(async () => {
        if (!this.child) throw new Error('redis-server exited at startup');
        return ping(this.port);
      }, START_TIMEOUT_MS);
    } catch (error) {
      await this.terminate('SIGKILL');
      throw new Error(`redis-server did not start on port ${this.port}: ${String(error)}\n${this.output}`);
    }
  }

  private async terminate(signal: NodeJS.Signals): Promise<void> {
    const child = this.child;
    if (!child) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    await Promise.race([exited, sleep(WAIT_MS)]);
    if (this.child === child) {
      // Did not go within WAIT_MS of a polite signal: force it.
      child.kill('SIGKILL');
      await Promise.race([exited, sleep(WAIT_MS)]);
    }
    this.child = undefined;
  }
}

/** Asks the OS for a free loopback port. Another process could take it before Redis binds; rare enough. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no TCP port from the OS');
  return address.port;
}

/** True if nothing listens on loopback `port` now. */
export async function isFree(port: number): Promise<boolean> {
  const server = createServer();
  const bound = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (bound) await new Promise<void>((resolve) => server.close(() => resolve()));
  return bound;
}

/** True once something on `port` answers a RESP PING with +PONG (a bare socket, no client). */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (answered: boolean) => {
      socket.destroy();
      resolve(answered);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

export function findOnPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

async function withDeadline<T>(promise: Promise<T>, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${message} within ${WAIT_MS} ms`)), WAIT_MS);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function escapeGlob(literal: string): string {
  return literal.replace(/[*?[\]\\]/g, '\\$&');
}
