// --- The guard's pieces on their own, and the guard alone in front of a no-op tool ---
//
// Each piece is timed in batches (a single key check takes a tenth of a microsecond, below
// what one clock reading can resolve), and the batches of all pieces are interleaved in
// rotating order, as in the main matrix. A sample is one batch's time divided by its calls.

import { randomUUID } from 'node:crypto';
import {
  checkIdempotencyKey,
  createToolCallGuard,
  fingerprintToolCall,
  IdempotencyErrorType,
  idempotencyErrorOf,
  type JsonObject,
  MemoryIdempotencyStore,
} from '../idempotency/index.js';
import { rotate } from './matrix.js';
import { jsonBytes, orderArgumentsOfSize, SMALL_ARGUMENTS } from './payloads.js';
import { type Summary, summarize } from './stats.js';
import { AMOUNT, TOOL, WrongAnswerError } from './variants.js';

export interface PiecePlan {
  rounds: number;
  /** Roughly how long one batch of each piece should take, in milliseconds. */
  batchMs: number;
}

export interface PieceRow extends Summary {
  piece: string;
  /** What the piece was given, for the table (e.g. the arguments' size in bytes). */
  input: string;
  /** Calls per batch. */
  batchCalls: number;
}

interface Piece {
  piece: string;
  input: string;
  /** Untimed, before each batch (fresh keys, say). */
  prepare(calls: number): void;
  /** Timed: `calls` calls, one after another. */
  run(calls: number): Promise<void>;
}

export async function runPieces(plan: PiecePlan, progress: (message: string) => void): Promise<PieceRow[]> {
  const pieces = [...validationAndFingerprint(), ...guardAlone()];
  // Size each piece's batch from a short trial, so every batch lasts about `batchMs`.
  // The trial doubles as warm-up: it runs until a batch takes `batchMs`, twice over.
  const batches = new Map<Piece, number>();
  for (const piece of pieces) {
    let calls = 1;
    let long = 0;
    while (long < 2) {
      piece.prepare(calls);
      const started = performance.now();
      await piece.run(calls);
      const ms = performance.now() - started;
      if (ms >= plan.batchMs) long += 1;
      else calls *= 2;
    }
    batches.set(piece, calls);
  }
  const samples = new Map<Piece, number[]>(pieces.map((piece) => [piece, []]));
  for (let round = 0; round < plan.rounds; round++) {
    for (const piece of rotate(pieces, round)) {
      const calls = batches.get(piece) ?? 1;
      piece.prepare(calls);
      const started = performance.now();
      await piece.run(calls);
      samples.get(piece)?.push(((performance.now() - started) * 1000) / calls);
    }
    if ((round + 1) % 10 === 0 || round + 1 === plan.rounds) {
      progress(`pieces: round ${round + 1}/${plan.rounds}`);
    }
  }
  return pieces.map((piece) => ({
    piece: piece.piece,
    input: piece.input,
    batchCalls: batches.get(piece) ?? 1,
    ...summarize(samples.get(piece) ?? []),
  }));
}

// --- Key validation and the equivalence fingerprint ---

export const FINGERPRINT_SIZES = [
  { label: 'small', arguments: SMALL_ARGUMENTS },
  { label: '1 KB', arguments: orderArgumentsOfSize(1_024) },
  { label: '100 KB', arguments: orderArgumentsOfSize(100 * 1_024) },
] as const;

function validationAndFingerprint(): Piece[] {
  const key = randomUUID();
  const longKey = 'k'.repeat(255);
  const pieces: Piece[] = [
    {
      piece: 'key validation',
      input: 'UUID (36 chars)',
      prepare: () => {},
      run: async (calls) => {
        for (let i = 0; i < calls; i++) if (!checkIdempotencyKey(key).ok) throw new WrongAnswerError(key);
      },
    },
    {
      piece: 'key validation',
      input: '255 chars (the limit)',
      prepare: () => {},
      run: async (calls) => {
        for (let i = 0; i < calls; i++)
          if (!checkIdempotencyKey(longKey).ok) throw new WrongAnswerError(longKey);
      },
    },
  ];
  for (const size of FINGERPRINT_SIZES) {
    // A fresh parse per batch, as the guard gets: no cached strings or shapes from last time.
    let args: unknown = size.arguments;
    pieces.push({
      piece: 'fingerprint',
      input: `${size.label} (${jsonBytes(size.arguments)} B)`,
      prepare: () => {
        args = JSON.parse(JSON.stringify(size.arguments));
      },
      run: async (calls) => {
        for (let i = 0; i < calls; i++) {
          if (!fingerprintToolCall(TOOL, args).ok) throw new WrongAnswerError('fingerprint failed');
        }
      },
    });
  }
  return pieces;
}

// --- The guard alone: the real guard in front of a tool that does nothing ---
//
// No SDK, no transport, no parsing, no tool: the unkeyed row is the floor (a call through the
// guard's "no key" branch), and the keyed rows minus it are what the guard itself adds.

const NOOP_RESULT: JsonObject = {
  content: [{ type: 'text', text: `Charged ${AMOUNT}. New balance: ${AMOUNT}` }],
  structuredContent: { charged: AMOUNT, balance: AMOUNT },
};

function guardAlone(): Piece[] {
  const guard = createToolCallGuard({
    store: new MemoryIdempotencyStore({ maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000 }),
  });
  // `hold` keeps the original of the in-progress piece executing for the whole run.
  const call = (params: Record<string, unknown>) =>
    guard(params, {}, () => (isHeld(params) ? new Promise<never>(() => {}) : Promise.resolve(NOOP_RESULT)));
  const expectError = async (params: Record<string, unknown>, type: IdempotencyErrorType) => {
    try {
      await call(params);
    } catch (error) {
      if (idempotencyErrorOf(error)?.type === type) return;
      throw new WrongAnswerError(`guard alone: expected ${type}, got ${String(error)}`);
    }
    throw new WrongAnswerError(`guard alone: expected ${type}, got a result`);
  };
  const expectResult = async (params: Record<string, unknown>) => {
    if ((await call(params)) !== NOOP_RESULT) throw new WrongAnswerError('guard alone: expected the result');
  };

  const stored = { name: TOOL, arguments: SMALL_ARGUMENTS, idempotencyKey: randomUUID() };
  const held = { name: TOOL, arguments: { ...SMALL_ARGUMENTS, hold: true }, idempotencyKey: randomUUID() };
  let ready: Promise<unknown> | undefined;
  const setUp = () => {
    // The held original never settles: fired, not awaited. Its claim is written before the
    // guard's first await, so the key is in progress from here on.
    if (!ready) void call(held);
    ready ??= expectResult(stored);
    return ready;
  };
  let keys: string[] = [];
  const input = 'no-op tool, small arguments';
  return [
    {
      piece: 'guard alone: unkeyed (floor)',
      input,
      prepare: () => {},
      run: async (calls) => {
        for (let i = 0; i < calls; i++) await expectResult({ name: TOOL, arguments: SMALL_ARGUMENTS });
      },
    },
    {
      piece: 'guard alone: first execution',
      input,
      prepare: (calls) => {
        keys = Array.from({ length: calls }, () => randomUUID());
      },
      run: async (calls) => {
        for (let i = 0; i < calls; i++) {
          await expectResult({ name: TOOL, arguments: SMALL_ARGUMENTS, idempotencyKey: keys[i] });
        }
      },
    },
    {
      piece: 'guard alone: replay',
      input,
      prepare: () => {},
      run: async (calls) => {
        await setUp();
        for (let i = 0; i < calls; i++) await expectResult(stored);
      },
    },
    {
      piece: 'guard alone: conflict',
      input,
      prepare: () => {},
      run: async (calls) => {
        await setUp();
        const other = { ...stored, arguments: { amount: AMOUNT + 1 } };
        for (let i = 0; i < calls; i++) await expectError(other, IdempotencyErrorType.conflict);
      },
    },
    {
      piece: 'guard alone: in progress',
      input,
      prepare: () => {},
      run: async (calls) => {
        await setUp();
        for (let i = 0; i < calls; i++) await expectError(held, IdempotencyErrorType.inProgress);
      },
    },
  ];
}

function isHeld(params: Record<string, unknown>): boolean {
  const args: unknown = params.arguments;
  return typeof args === 'object' && args !== null && Reflect.get(args, 'hold') === true;
}
