// --- A Redis server for tests ---
//
// If `redis-server` is installed, each test file gets a private one on a free loopback port,
// with persistence off, which it can also kill, freeze and restart (the fail-closed tests
// need that), so every Redis test runs. Otherwise `REDIS_URL`, if set, is shared: tests only
// touch keys under their own unique prefix, and the ones that must crash Redis skip. With
// neither, `startRedis` returns undefined and the file skips its Redis tests, saying why.
// `startRedisCluster` starts a private three-master Redis Cluster the same way (it needs
// `redis-cli` too, to create the cluster), or returns undefined.

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

async function withAdmin(url: string, server: PrivateRedis | undefined): Promise<TestRedis> {
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

class PrivateRedis {
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

// --- A Redis Cluster for tests: three masters on loopback ---

export const REDIS_CLUSTER_SKIP_REASON =
  'Redis Cluster tests skipped: install redis-server and redis-cli (Debian: redis-server, which brings redis-tools)';

/** A cluster node listens on its port and talks to its peers on this much higher (the cluster bus). */
const CLUSTER_BUS_OFFSET = 10_000;

/** Creating the cluster (slots assigned, nodes meeting over the bus) takes a few seconds. */
const CLUSTER_WAIT_MS = 20_000;

export interface TestRedisCluster {
  /** One URL per master: the seeds a cluster client starts from. */
  urls: string[];
  /**
   * The masters, each with an admin connection to that node only (a key it does not serve is
   * answered MOVED). `restart` also waits until the whole cluster says `cluster_state:ok`.
   */
  nodes: TestRedis[];
  /** The master that serves `key` now: its slot (CLUSTER KEYSLOT), then the slot map. */
  nodeOf(key: string): Promise<TestRedis>;
  /** Stops every node. */
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /**
   * Persist every write before answering it (AOF, fsync always), so a node killed and
   * restarted comes back with every record it acknowledged: what a deployment that must never
   * execute twice runs. Off, a restarted node comes back empty.
   */
  appendOnly?: boolean;
  /** More `redis-server` arguments for every node (see `RedisOptions`). */
  args?: readonly string[];
}

/** Three masters, no replicas, every slot assigned, or undefined without redis-server and redis-cli. */
export async function startRedisCluster(options: ClusterOptions = {}): Promise<TestRedisCluster | undefined> {
  const binary = findOnPath('redis-server');
  const cli = findOnPath('redis-cli');
  if (!binary || !cli) return undefined;
  const args = [
    ...['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf'],
    ...(options.appendOnly ? ['--appendonly', 'yes', '--appendfsync', 'always'] : []),
    ...(options.args ?? []),
  ];
  const servers: PrivateRedis[] = [];
  const nodes: TestRedis[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((node) => node.stop()));
    await Promise.all(servers.slice(nodes.length).map((server) => server.stop()));
  };
  try {
    for (const port of await freeClusterPorts(3))
      servers.push(await PrivateRedis.start(binary, { port, args }));
    for (const server of servers) nodes.push(await withAdmin(server.url, server));
    await run(cli, [
      ...['--cluster', 'create', ...servers.map((server) => `127.0.0.1:${server.port}`)],
      ...['--cluster-replicas', '0', '--cluster-yes'],
    ]);
    const clusterOk = () =>
      waitUntil(
        async () => (await clusterStates(nodes)).every((state) => state === 'ok'),
        CLUSTER_WAIT_MS,
        100,
      );
    await clusterOk();
    const masters = nodes.map((node) => ({
      ...node,
      restart: async () => {
        await node.restart();
        // A master that restarts refuses commands (CLUSTERDOWN) for its first 2 s: until then
        // it is not back, whatever PING says.
        await clusterOk();
      },
    }));
    return {
      urls: masters.map((node) => node.url),
      nodes: masters,
      async nodeOf(key) {
        const [asked] = masters.filter((node) => node.admin.isReady);
        if (!asked) throw new Error('no cluster node is reachable');
        const slot = await asked.admin.clusterKeySlot(key);
        const range = (await asked.admin.clusterSlots()).find(({ from, to }) => from <= slot && slot <= to);
        const node = masters.find((candidate) => candidate.url === `redis://127.0.0.1:${range?.master.port}`);
        if (!node) throw new Error(`no master serves slot ${slot}`);
        return node;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Each node's `cluster_state` (ok or fail), or `down` for a node that does not answer. */
async function clusterStates(nodes: TestRedis[]): Promise<string[]> {
  return Promise.all(
    nodes.map(async (node) => {
      const info = await node.admin.clusterInfo().catch(() => '');
      return /cluster_state:(\w+)/.exec(String(info))?.[1] ?? 'down';
    }),
  );
}

/** `count` free loopback ports whose cluster bus ports are free too, none of them the same. */
async function freeClusterPorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  const taken = new Set<number>();
  for (let attempt = 0; ports.length < count; attempt++) {
    if (attempt === 100) throw new Error(`no ${count} free loopback ports with free cluster bus ports`);
    const port = await freePort();
    const bus = port + CLUSTER_BUS_OFFSET;
    if (bus > 65_535 || taken.has(port) || taken.has(bus) || !(await isFree(bus))) continue;
    ports.push(port);
    taken.add(port).add(bus);
  }
  return ports;
}

/** Runs `command` to its end, within CLUSTER_WAIT_MS; rejects with its output if it fails. */
async function run(command: string, args: string[]): Promise<void> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), CLUSTER_WAIT_MS);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited with ${code}:\n${output}`);
}

// --- Round trips, as Redis receives them ---

export interface SeenCommands<T> {
  /** The commands clients sent (names, upper case), every node's together. */
  commands: string[];
  /** The same, node by node, in the order the admin connections were given. */
  perNode: string[][];
  value: T;
}

/**
 * The commands Redis received from clients, naming `keyText`, while `action` ran: one per round
 * trip, on each node of `admins` (one Redis, or every master of a cluster). MONITOR rather than
 * INFO commandstats, which also counts the commands a Lua script runs inside its single round
 * trip, and every other client of a shared server.
 */
export async function commandsDuring<T>(
  admins: readonly RedisClientType[],
  keyText: string,
  action: () => Promise<T>,
): Promise<SeenCommands<T>> {
  const monitors: Array<{ admin: RedisClientType; monitor: RedisClientType; lines: string[] }> = [];
  // A keyless command as the marker: any node runs it (a key of another node's slot is refused).
  const marker = `sep3182-marker:${randomUUID()}`;
  let value: T;
  try {
    for (const admin of admins) {
      const monitor = admin.duplicate();
      monitor.on('error', () => {});
      const lines: string[] = [];
      monitors.push({ admin, monitor, lines });
      await monitor.connect();
      // e.g. 1700000000.123456 [0 127.0.0.1:46672] "EVAL" "…" "3" "sep3182-test:…"; `[0 lua]` inside a script
      await monitor.monitor((line) => lines.push(line));
    }
    value = await action();
    // MONITOR streams behind the commands; once a later marker shows, all of the action's have.
    for (const { admin, lines } of monitors) {
      await admin.echo(marker);
      await waitUntil(async () => lines.some((line) => line.includes(marker)));
    }
  } finally {
    for (const { monitor } of monitors) monitor.destroy();
  }
  const perNode = monitors.map(({ lines }) =>
    lines.flatMap((line) => {
      const [, source, command] = /^\S+ \[\d+ ([^\]]+)\] "([^"]+)"/.exec(line) ?? [];
      return source !== 'lua' && command && line.includes(keyText) && !line.includes(marker)
        ? [command.toUpperCase()]
        : [];
    }),
  );
  return { commands: perNode.flat(), perNode, value };
}

/** Asks the OS for a free loopback port. Another process could take it before Redis binds; rare enough. */
async function freePort(): Promise<number> {
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
async function isFree(port: number): Promise<boolean> {
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

function findOnPath(command: string): string | undefined {
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
