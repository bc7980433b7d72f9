// --- What the demo server's decision log line costs per keyed call ---
//
// Run by bench.ts in a process of its own, whose stderr is a pipe the parent reads, as a
// stdio or HTTP server's is:  node --import tsx bench/log-line.ts <rounds> <batch>
// server.ts writes one JSON line per keyed decision to stderr, synchronously (stderr is a
// pipe: Node writes pipes synchronously on Linux), before the guard's answer goes out. Timed
// twice: as it is, and with the write itself replaced by nothing (the line only built).

import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import type { DecisionEvent } from '../idempotency/index.js';
import { logDecision } from '../server.js';
import { reportResult } from './child.js';
import { summarize } from './stats.js';

export const LogLineResult = z.object({
  lineBytes: z.number(),
  builtMedianUs: z.number(),
  builtP99Us: z.number(),
  writtenMedianUs: z.number(),
  writtenP99Us: z.number(),
  batches: z.number(),
  batchCalls: z.number(),
});
export type LogLineResult = z.infer<typeof LogLineResult>;

function main(rounds: number, batch: number): LogLineResult {
  const event: DecisionEvent = {
    decision: 'executed',
    scope: 'local',
    idempotencyKey: randomUUID(),
    tool: 'charge_guarded',
    durationMs: 0.123,
  };
  const stderr = process.stderr;
  const write = stderr.write.bind(stderr);
  let bytes = 0;
  const counting = (chunk: string | Uint8Array): boolean => {
    bytes += chunk.length;
    return true;
  };
  const time = (): number => {
    const started = performance.now();
    for (let i = 0; i < batch; i++) logDecision(event);
    return ((performance.now() - started) * 1000) / batch;
  };
  const built: number[] = [];
  const written: number[] = [];
  for (let round = -2; round < rounds; round++) {
    // Alternate the two, so drift lands on both; the first two rounds are warm-up.
    stderr.write = counting;
    const b = time();
    stderr.write = write;
    const w = time();
    if (round >= 0) {
      built.push(b);
      written.push(w);
    }
  }
  const lineBytes = bytes / ((rounds + 2) * batch);
  const b = summarize(built);
  const w = summarize(written);
  return {
    lineBytes,
    builtMedianUs: b.medianUs,
    builtP99Us: b.p99Us,
    writtenMedianUs: w.medianUs,
    writtenP99Us: w.p99Us,
    batches: rounds,
    batchCalls: batch,
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [rounds = '30', batch = '1000'] = process.argv.slice(2);
  reportResult(main(Number(rounds), Number(batch)));
}
