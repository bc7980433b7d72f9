// --- What a server's /metrics says: the Prometheus text of `--metrics-port`, read back ---
//
// The demo and the tests scrape a running server as Prometheus would, over HTTP, and read the
// guard's figures out of the text: each sample's name, labels and value.

/** One line of the exposition: `name{label="value",…} value`. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Scrape {
  /** The body exactly as served. */
  text: string;
  samples: Sample[];
}

export async function scrape(url: URL): Promise<Scrape> {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url.href} answered ${response.status}`);
  const text = await response.text();
  return { text, samples: samplesOf(text) };
}

/** Prometheus' name for the guard's decision counter (`idempotency.decisions`, a counter: `_total`). */
export const DECISIONS = 'idempotency_decisions_total';

/**
 * The decisions counted, as `decision tool` → count (`decision` alone for a call with no tool
 * name), in the order first counted: what to compare with the calls a scenario made.
 */
export function decisionCounts(samples: readonly Sample[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const { name, labels, value } of samples) {
    if (name !== DECISIONS) continue;
    const key = [labels.idempotency_decision, labels.gen_ai_tool_name].filter(Boolean).join(' ');
    counts.set(key, (counts.get(key) ?? 0) + value);
  }
  return counts;
}

/** The sum of `name`'s samples whose labels include `labels`. */
export function total(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

function samplesOf(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match?.[1] || match[3] === undefined) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      if (key !== undefined && value !== undefined)
        labels[key] = value.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}
