// --- What runs on both Node lines ---
//
// `.ci/run` runs the whole suite on Node 20 (the machine's, the engines floor, where the README's
// `npm test` runs here), then, on Node 24, the files below: each tests something Node itself
// provides, which is not the same code on the two lines. The rest is the project's own JavaScript
// over sockets, files and child processes (Redis, Postgres, the payment provider, the checker, the
// docs' commands): the Node line does not change what it does, and running it twice would prove
// nothing the first run did not. The AI SDK's and Mastra's own loops, and the 2026-07-28
// conformance suite, run on Node 24 in the first run already (support/node24.ts).
//
// `tsx test/support/node-lines.ts` prints the files, one a line, for `vitest run`.

import { fileURLToPath } from 'node:url';

export const BOTH_LINES: Record<string, string> = {
  // The SQLite driver: better-sqlite3 on Node 20, node:sqlite from 22.13.
  'test/idempotency/stores/sqlite/store.test.ts':
    'the SQLite store on its driver, processes racing on one file',
  'test/idempotency/stores/contract.test.ts': 'the store contract on the SQLite driver (and every store)',
  'test/model/guard.test.ts': 'the guard against the model, on memory and SQLite',
  'test/idempotency/stores/sqlite/driver.test.ts': 'each binding keeping values and reading failures alike',
  'test/idempotency/stores/sqlite/file.test.ts': "migrations and refusals, on that line's binding",
  'test/idempotency/stores/sqlite/sql.test.ts':
    "the store's statements against a model, on that line's binding",
  'test/idempotency/stores/sqlite/transaction.test.ts': "a tool's transaction, on that line's binding",
  // V8's Unicode: String.prototype.isWellFormed and the \p{Cc} the key's rule reads.
  'test/idempotency/core/key.test.ts': "keys of every shape, on that line's V8",
  'test/idempotency/agents/digest.test.ts': "messages digested as that line's V8 and Buffer read them",
  // The execution context rides AsyncLocalStorage, which Node 24 rebuilt on AsyncContextFrame.
  'test/idempotency/core/execution.test.ts':
    "the execution context a tool sees, through the guard's async hops",
  'test/idempotency/core/guard.test.ts': 'the guard in process, on both SDK lines',
  'test/idempotency/otel/otel.test.ts': "the active span and the telemetry's context, through the guard",
  'test/idempotency/agents/wire.test.ts':
    'the agent adapters, which hand a tool call its key in async context',
  'test/idempotency/agents/ai-sdk.test.ts': "the AI SDK adapter's key, handed over in async context",
  'test/idempotency/agents/mastra.test.ts': "the Mastra adapter's steps, followed in async context",
  'test/idempotency/agents/call.test.ts': "a tool call's key, held in async context across timers",
  'test/interop/test/agents-langchain.test.ts': "LangChain, whose callbacks ride Node's async context",
  // node:http (its parser, llhttp, and its timeouts), Node's streams and the fetch it bundles
  // (undici): each line has its own.
  'test/e2e/stdio.test.ts': "the SEP's cases over stdio, on Node's streams",
  'test/e2e/http.test.ts': "the SEP's cases over Streamable HTTP, on node:http",
  'test/e2e/hostile.test.ts': "malformed bytes, as each line's HTTP parser and JSON reader take them",
  'test/demo/hosting/http.test.ts': "the HTTP entry's timeouts and connection limits",
  'test/e2e/http-origin.test.ts': 'Host and Origin as node:http hands them over',
  'test/idempotency/client/client.test.ts': "the client's retries over the bundled fetch",
  'test/idempotency/sdk/v2.test.ts': "the v2 adapter behind the SDK's fetch handler, on that line's Request",
  // Module loading: the main entry is checked to load no dependency through a module hook.
  'test/idempotency/index.test.ts': "the main entry's imports, read through that line's module hooks",
  'test/demo/hosting/log.test.ts': 'decision lines flushed to a pipe before the process exits',
  'test/demo/processes/launch.test.ts': 'what a process does with an error no one handled',
  'test/checker/front-door.test.ts': "a server that cannot start, read from its runtime's error line",
  // npm itself: 10 with Node 20, 11 with Node 24.
  'test/e2e/npm-scripts.test.ts': "a signal to npm's own PID, passed to the server it started",
  'test/docs/quickstart.test.ts': "the library README's quick start, with that line's npm and tsc",
  'test/e2e/package.test.ts': "the packages packed and installed by that line's npm",
};

/** The files, as `vitest run` takes them. */
export const bothLinesFiles = (): string[] => Object.keys(BOTH_LINES);

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(bothLinesFiles().join('\n'));
