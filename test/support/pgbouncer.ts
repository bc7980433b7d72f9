// --- A PgBouncer in front of a test's Postgres ---
//
// If `pgbouncer` is installed (Debian's package puts it in /usr/sbin, off a user's PATH), a test
// can put a private one on a free loopback port in front of its private Postgres cluster, in the
// pool mode it is about, with PgBouncer's defaults otherwise: what a server author meets who
// points the store at the pooler a DBA set up. Trust authentication on loopback, as the cluster.
// Its admin console (`RECONNECT`, `SHOW POOLS`) answers the user `postgres`.
//
// PgBouncer refuses to run as root: as root, it runs as the `postgres` user (spawned with that
// uid and gid, as the cluster is), its configuration in a directory made for it and handed to
// that user. With no pgbouncer binary, `startPgBouncer` returns undefined and the test skips.

import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { START_TIMEOUT_MS, WAIT_MS, waitUntil } from '../../demo/processes/bounds.js';
import { freePort, userIds } from '../../demo/processes/postgres-server.js';

export const PGBOUNCER_SKIP_REASON =
  'PgBouncer tests skipped: install pgbouncer (Debian: apt-get install pgbouncer)';

/** Where Debian's package installs it. */
const DEBIAN_PGBOUNCER = '/usr/sbin/pgbouncer';

/** The user PgBouncer runs as when the tests run as root, and the one its admin console answers. */
const PGBOUNCER_USER = 'postgres';

export interface PgBouncerOptions {
  /** The Postgres to pool, as a URL: its host and port; every database name goes to the same name there. */
  postgresUrl: string;
  poolMode: 'session' | 'transaction';
  /** More `[pgbouncer]` settings, after the defaults (so they win): `{ server_lifetime: '1' }`. */
  settings?: Readonly<Record<string, string>>;
}

export interface TestPgBouncer {
  /** `postgresUrl` with PgBouncer's port in place of Postgres': what a store connects to. */
  url: string;
  /** Runs one command on the admin console (`RECONNECT`, `SHOW SERVERS`) and answers its rows. */
  admin(command: string): Promise<Array<Record<string, unknown>>>;
  /** Rewrites the configuration with `settings` changed, and has PgBouncer read it (`RELOAD`). */
  reload(settings: Readonly<Record<string, string>>): Promise<void>;
  /** Stops PgBouncer (its clients' connections end) and deletes its directory. */
  stop(): Promise<void>;
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<TestPgBouncer | undefined> {
  const binary = findPgBouncer();
  if (!binary) return undefined;
  const dir = await mkdtemp(join(tmpdir(), 'sep3182-pgbouncer-'));
  const user = userInfo().uid === 0 ? await userIds(PGBOUNCER_USER) : undefined;
  const upstream = new URL(options.postgresUrl);
  const port = await freePort();
  const settings: Record<string, string> = {
    listen_addr: '127.0.0.1',
    listen_port: String(port),
    // No Unix socket: nothing in the shared /tmp, and nothing else to pick it up by.
    unix_socket_dir: '',
    auth_type: 'trust',
    // Trust still needs the user listed (PgBouncer's rule); no password is checked.
    auth_file: join(dir, 'userlist.txt'),
    admin_users: PGBOUNCER_USER,
    pool_mode: options.poolMode,
    logfile: join(dir, 'pgbouncer.log'),
    ...options.settings,
  };
  const config = join(dir, 'pgbouncer.ini');
  const writeConfig = async () => {
    const ini = [
      '[databases]',
      `* = host=${upstream.hostname} port=${upstream.port}`,
      '[pgbouncer]',
      ...Object.entries(settings).map(([name, value]) => `${name} = ${value}`),
    ];
    await writeFile(config, `${ini.join('\n')}\n`);
    if (user) await chown(config, user.uid, user.gid);
  };
  await writeConfig();
  await writeFile(settings.auth_file ?? '', `"${PGBOUNCER_USER}" ""\n"${upstream.username}" ""\n`);
  if (user) {
    for (const path of [dir, settings.auth_file ?? '']) await chown(path, user.uid, user.gid);
  }

  const child = spawn(binary, [config], { ...user, cwd: dir, stdio: 'ignore' });
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  const killOnExit = () => child.kill('SIGKILL');
  // A test run that dies before `stop` must not leave a pooler behind.
  process.once('exit', killOnExit);
  const url = new URL(options.postgresUrl);
  url.port = String(port);
  const admin = async (command: string) => {
    const client = new pg.Client({
      host: '127.0.0.1',
      port,
      user: PGBOUNCER_USER,
      database: 'pgbouncer',
      connectionTimeoutMillis: WAIT_MS,
    });
    client.on('error', () => {});
    await client.connect();
    try {
      // The admin console speaks the simple query protocol only, which a query without values is.
      const result = await client.query<Record<string, unknown>>(command);
      return result.rows;
    } finally {
      await client.end().catch(() => {});
    }
  };
  const reload = async (changed: Readonly<Record<string, string>>) => {
    Object.assign(settings, changed);
    await writeConfig();
    await admin('RELOAD');
  };
  const stop = async () => {
    process.off('exit', killOnExit);
    await stopChild(child, () => exited);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitUntil(async () => {
      if (exited) throw new Error('pgbouncer exited at startup');
      return (await admin('SHOW VERSION').catch(() => undefined)) !== undefined;
    }, START_TIMEOUT_MS);
  } catch (error) {
    const log = await readFile(settings.logfile ?? '', 'utf8').catch(() => '');
    await stop();
    throw new Error(`pgbouncer did not start on port ${port}: ${String(error)}\n${log.slice(-2000)}`);
  }
  return { url: url.toString(), admin, reload, stop };
}

/** SIGTERM, then SIGKILL if it has not exited within the wait. */
async function stopChild(child: ChildProcess, exited: () => boolean): Promise<void> {
  if (exited()) return;
  child.kill('SIGTERM');
  try {
    await waitUntil(async () => exited(), WAIT_MS);
  } catch {
    child.kill('SIGKILL');
    await waitUntil(async () => exited(), WAIT_MS);
  }
}

/** True when a pgbouncer binary is installed: on PATH, or where Debian puts it. */
export function pgBouncerInstalled(): boolean {
  return findPgBouncer() !== undefined;
}

/** pgbouncer on PATH, else where Debian puts it. */
function findPgBouncer(): string | undefined {
  const candidates = [
    ...(process.env.PATH ?? '').split(delimiter).flatMap((dir) => (dir ? [join(dir, 'pgbouncer')] : [])),
    DEBIAN_PGBOUNCER,
  ];
  return candidates.find((path) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}
