// --- stdio: every bad line is answered, and none ends the session ---
//
// The SDK's stdio transport drops a line it cannot read without a word, where JSON-RPC 2.0
// asks for a Parse error (-32700) or an Invalid Request (-32600) answer; and one line longer
// than its 10 MB buffer closes the transport for good, leaving a process that never answers
// again. So stdin passes through this filter first. A line over `maxLineBytes` is skipped as it
// streams past, never buffered whole, and answered; a line that is not a JSON-RPC 2.0
// message is answered with what is wrong; every other line goes on to the SDK unchanged.

import { Transform, type TransformCallback } from 'node:stream';
import type { McpServer } from '@modelcontextprotocol/server';
import { parseJSONRPCMessage } from '@modelcontextprotocol/server';
import { StdioServerTransport, serveStdio as sdkServeStdio } from '@modelcontextprotocol/server/stdio';

export interface StdioService {
  /** The filtered input: it ends once the SDK has read every line the client sent. */
  input: NodeJS.ReadableStream;
  /** Closes the connection: calls in flight are aborted, unanswered. */
  close(): Promise<void>;
}

/**
 * Serves `factory` on this process's stdin and stdout through the line filter, with the SDK's
 * `serveStdio` entry: the opening message picks the era (a 2026-07-28 request with its envelope,
 * or a 2025 initialize), and one server from the factory serves the connection.
 */
export function serveStdio(factory: () => McpServer, onerror?: (error: Error) => void): StdioService {
  const answer = (message: StdioErrorAnswer) => process.stdout.write(`${JSON.stringify(message)}\n`);
  const input = process.stdin.pipe(new StdioLineFilter(answer));
  const transport = new StdioServerTransport(input, process.stdout);
  const served = sdkServeStdio(factory, { transport, onerror });
  return { input, close: served.close };
}

/** 4 MB, as the HTTP body limit (http.ts): far beyond any sane call, small enough to buffer. */
export const MAX_STDIO_LINE_BYTES = 4 * 1024 * 1024;

const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
const NEWLINE = 0x0a;

/** JSON-RPC 2.0: the id is null when it could not be read from the request. */
export interface StdioErrorAnswer {
  jsonrpc: '2.0';
  id: string | number | null;
  error: { code: number; message: string };
}

export class StdioLineFilter extends Transform {
  private line: Buffer[] = [];
  private lineBytes = 0;
  private oversized = false;

  constructor(
    private readonly answer: (message: StdioErrorAnswer) => void,
    private readonly maxLineBytes = MAX_STDIO_LINE_BYTES,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    let start = 0;
    for (let end = chunk.indexOf(NEWLINE); end !== -1; end = chunk.indexOf(NEWLINE, start)) {
      this.collect(chunk.subarray(start, end));
      this.endLine();
      start = end + 1;
    }
    this.collect(chunk.subarray(start));
    done();
  }

  private collect(part: Buffer): void {
    if (this.oversized || part.length === 0) return;
    if (this.lineBytes + part.length > this.maxLineBytes) {
      this.oversized = true;
      this.line = [];
      return;
    }
    this.line.push(part);
    this.lineBytes += part.length;
  }

  private endLine(): void {
    const { line, oversized } = this;
    this.line = [];
    this.lineBytes = 0;
    this.oversized = false;
    if (oversized) {
      const limit = `${this.maxLineBytes} bytes`;
      this.answer(errorAnswer(null, INVALID_REQUEST, `Request too large: a message may be at most ${limit}`));
      return;
    }
    const text = Buffer.concat(line).toString('utf8');
    if (text.trim() === '') return;
    const problem = problemWith(text);
    if (problem) this.answer(problem);
    else this.push(`${text}\n`);
  }
}

/** The answer a line deserves if the SDK would drop it, or undefined if it reads it. */
function problemWith(line: string): StdioErrorAnswer | undefined {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (error) {
    return errorAnswer(
      null,
      PARSE_ERROR,
      `Parse error: ${error instanceof Error ? error.message : 'not JSON'}`,
    );
  }
  if (isJsonRpcMessage(value)) return undefined;
  return errorAnswer(idOf(value), INVALID_REQUEST, `Invalid Request: ${whatIsWrong(value)}`);
}

function isJsonRpcMessage(value: unknown): boolean {
  try {
    parseJSONRPCMessage(value);
    return true;
  } catch {
    return false;
  }
}

const JSON_RPC_MEMBERS = new Set(['jsonrpc', 'id', 'method', 'params', 'result', 'error']);

function whatIsWrong(value: unknown): string {
  if (Array.isArray(value)) return 'batches are not supported; send one message per line';
  if (!isObject(value)) return 'a message must be a JSON object';
  if (value.jsonrpc !== '2.0') return 'jsonrpc must be "2.0"';
  if (Object.hasOwn(value, 'id') && idOf(value) === null) return 'id must be a string or an integer';
  const stranger = Object.keys(value).find((member) => !JSON_RPC_MEMBERS.has(member));
  if (stranger !== undefined) return `JSON-RPC 2.0 defines no member ${JSON.stringify(stranger)}`;
  if (Object.hasOwn(value, 'method')) {
    if (typeof value.method !== 'string') return 'method must be a string';
    if (Object.hasOwn(value, 'params') && !isObject(value.params)) return 'params must be an object';
    const meta = isObject(value.params) ? value.params._meta : undefined;
    if (meta !== undefined && !isObject(meta)) return 'params._meta must be an object';
  } else if (!Object.hasOwn(value, 'result') && !Object.hasOwn(value, 'error')) {
    return 'a message needs a method (or a result or an error)';
  }
  if (Object.hasOwn(value, 'result') && !isObject(value.result)) return 'result must be an object';
  if (Object.hasOwn(value, 'error'))
    return 'error must be an object with an integer code and a string message';
  return 'not a JSON-RPC 2.0 message';
}
function idOf(value: unknown): string | number | null {
  const id = isObject(value) ? value.id : undefined;
  if (typeof id === 'string') return id;
  return typeof id === 'number' && Number.isSafeInteger(id) ? id : null;
}

function errorAnswer(id: string | number | null, code: number, message: string): StdioErrorAnswer {
  return { jsonrpc: '2.0', id, error: { code, message } };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
