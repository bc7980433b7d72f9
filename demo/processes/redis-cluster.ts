// --- A Redis Cluster for tests: three masters on loopback ---
//
// Started as redis-server.ts starts one Redis, each master a private `redis-server`; `redis-cli`
// joins them into a cluster. Without both, `startRedisCluster` returns undefined.

import { spawn } from 'node:child_process';
import { waitUntil } from './bounds.js';
import { findOnPath, freePort, isFree, PrivateRedis, type TestRedis, withAdmin } from './redis-server.js';

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
