// --- Reading the effect: the counter a result shows, and how many executions moved it ---
//
// A check never takes an answer's word for whether something executed: it reads a number the
// tool's result shows (a balance, a count) and divides how far it moved by how far one execution
// moves it. Results read the way real ones do: the text may name the caller ("Charged 1 usd to
// bob"), show a per-account balance beside a global count, or move one number by the amount
// charged. So each counting number is found again by its label (the word before it) and by its
// position, and a verdict is given whenever every reading that can be made agrees.

import { isObject } from './wire.js';

/** The part of an answer the effect is read from (a `Call` in `rules.ts`). */
export interface Shown {
  kind: 'success' | 'tool error' | 'error';
  value: unknown;
}

/** Where a user says the counter is: a JSON pointer into `structuredContent`, or a pattern on the text. */
export type CounterOption = { pointer: string } | { pattern: RegExp };

/** One number a result shows, and what finds it again in another result. */
interface Spot {
  value: number;
  /** The word before it in the text (with its `:` or `#`), or its JSON pointer; `@2` for a repeat. */
  label: string;
}

/** A number that counts executions: where to find it, and how far one execution moves it. */
interface Mark {
  label: string;
  /** Its place among the result's numbers, for a result whose labels changed. */
  index: number;
  step: number;
}

export interface Counter {
  source: 'text' | 'structuredContent' | 'option';
  marks: Mark[];
  /** How many numbers the baseline's result showed: a position means something only among as many. */
  shown: number;
  option?: CounterOption;
}

/** A number as a result's text writes it. */
const NUMBER = /-?\d+(?:\.\d+)?/g;
/** The last word before a number, and what stands between them (`balance: `, `execution #`). */
const LABEL = /([\p{L}_][\p{L}\p{N}_]*)?[^\p{L}\p{N}]*$/u;

/** Every text content of a result, one per line. */
function textOf(value: unknown): string {
  const content = isObject(value) && Array.isArray(value.content) ? value.content : [];
  return content
    .flatMap((item) => (isObject(item) && typeof item.text === 'string' ? [item.text] : []))
    .join('\n');
}

/** A label seen before gets its occurrence, so that two "balance:" numbers stay two. */
function labelled(entries: [string, number][]): Spot[] {
  const seen = new Map<string, number>();
  return entries.map(([label, value]) => {
    const n = (seen.get(label) ?? 0) + 1;
    seen.set(label, n);
    return { value, label: n === 1 ? label : `${label}@${n}` };
  });
}

function textSpots(shown: Shown): Spot[] {
  const text = textOf(shown.value);
  let end = 0;
  const entries: [string, number][] = [];
  for (const match of text.matchAll(NUMBER)) {
    const before = text.slice(end, match.index);
    entries.push([(LABEL.exec(before)?.[0] ?? '').replace(/\s+/g, ' ').trim(), Number(match[0])]);
    end = match.index + match[0].length;
  }
  return labelled(entries);
}

/** The numbers in `structuredContent`, each labelled with its JSON pointer. */
function structuredSpots(shown: Shown): Spot[] {
  const entries: [string, number][] = [];
  const visit = (value: unknown, pointer: string) => {
    if (typeof value === 'number') entries.push([pointer, value]);
    else if (Array.isArray(value)) for (const [i, item] of value.entries()) visit(item, `${pointer}/${i}`);
    else if (isObject(value))
      for (const [k, v] of Object.entries(value))
        visit(v, `${pointer}/${k.replaceAll('~', '~0').replaceAll('/', '~1')}`);
  };
  if (isObject(shown.value)) visit(shown.value.structuredContent, '');
  return labelled(entries);
}

/** The number `option` points at in a result, if it shows one. */
function optionValue(option: CounterOption, shown: Shown): number | undefined {
  if ('pointer' in option) {
    const label = option.pointer;
    return structuredSpots(shown).find((spot) => spot.label === label)?.value;
  }
  const match = option.pattern.exec(textOf(shown.value));
  const value = Number((match?.[1] ?? match?.[0] ?? '').replace(/,/g, ''));
  return match && Number.isFinite(value) ? value : undefined;
}

function spotsOf(counter: Counter, shown: Shown): Spot[] {
  if (shown.kind === 'error') return [];
  if (counter.option) {
    const value = optionValue(counter.option, shown);
    return value === undefined ? [] : [{ value, label: '' }];
  }
  return counter.source === 'text' ? textSpots(shown) : structuredSpots(shown);
}

/** The numbers that moved between two executions of the same call, matched by label. */
function moved(a: Spot[], b: Spot[]): Mark[] {
  return a.flatMap((spot, index) => {
    const other = b.find((s) => s.label === spot.label);
    return other && other.value !== spot.value
      ? [{ label: spot.label, index, step: other.value - spot.value }]
      : [];
  });
}

/**
 * The counter two executions of the same call show: the `--counter` a user named, or the numbers
 * that moved in the text, or else in `structuredContent`. An error shows no counter.
 */
export function counterOf(first: Shown, second: Shown, option?: CounterOption): Counter | undefined {
  if (first.kind === 'error' || second.kind === 'error') return undefined;
  if (option) {
    const [a, b] = [optionValue(option, first), optionValue(option, second)];
    if (a === undefined || b === undefined || a === b) return undefined;
    return { source: 'option', marks: [{ label: '', index: 0, step: b - a }], shown: 1, option };
  }
  for (const [source, spots] of [
    ['text', textSpots],
    ['structuredContent', structuredSpots],
  ] as const) {
    const [a, b] = [spots(first), spots(second)];
    const marks = moved(a, b);
    if (marks.length > 0) return { source, marks, shown: a.length };
  }
  return undefined;
}

/** Why `--counter` read no counter from two executions, for the run's report. */
export function optionMissed(option: CounterOption, first: Shown, second: Shown): string {
  const [a, b] = [optionValue(option, first), optionValue(option, second)];
  if (a === undefined || b === undefined) return `--counter ${optionText(option)} finds no number in them`;
  return `the number --counter ${optionText(option)} reads stayed at ${a}`;
}

const optionText = (option: CounterOption) =>
  'pointer' in option ? option.pointer : JSON.stringify(option.pattern.source);

const steps = (marks: Mark[]) => marks.map((mark) => mark.step).join(', ');

/** Which numbers the counter is, in words, for the report. */
export function describeCounter(counter: Counter): string {
  const { marks } = counter;
  const by = marks.length === 1 ? 'step' : 'steps';
  if (counter.option) return `--counter ${optionText(counter.option)} (${by} ${steps(marks)})`;
  if (counter.source === 'structuredContent')
    return `structuredContent ${marks.map((mark) => mark.label).join(' and ')} (${by} ${steps(marks)})`;
  const names = marks.map((mark) =>
    mark.label ? `the number after "${mark.label.replace(/@\d+$/, '')}"` : `number ${mark.index + 1}`,
  );
  return `${names.join(' and ')} in the result's text (${by} ${steps(marks)})`;
}

/** The counter's reading in a result (`7`, or `7/3` for two numbers), by label, else by position. */
export function reading(counter: Counter, shown: Shown): string {
  const spots = spotsOf(counter, shown);
  return counter.marks
    .map((mark) => valueAt(counter, mark, spots, 'label') ?? valueAt(counter, mark, spots, 'position') ?? '?')
    .join('/');
}

function valueAt(counter: Counter, mark: Mark, spots: Spot[], by: 'label' | 'position'): number | undefined {
  if (by === 'label') return spots.find((spot) => spot.label === mark.label)?.value;
  return spots.length === counter.shown ? spots[mark.index]?.value : undefined;
}

/**
 * How many executions moved the counter from `from` to `to`, as every reading that can be made
 * says (each counting number, found by its label and by its position): the count when they all
 * agree; when they differ (one number moves by the amount charged, another by one), the reading
 * nearest `expected` if every reading lies on the same side of it, so that "more than expected"
 * and "fewer" stay verdicts; undefined when the readings disagree about that, or none can be made.
 */
export function executionsBetween(
  counter: Counter,
  from: Shown,
  to: Shown,
  expected = 1,
): number | undefined {
  const [a, b] = [spotsOf(counter, from), spotsOf(counter, to)];
  const counts = counter.marks.flatMap((mark) =>
    (['label', 'position'] as const).flatMap((by) => {
      const [x, y] = [valueAt(counter, mark, a, by), valueAt(counter, mark, b, by)];
      return x === undefined || y === undefined ? [] : [(y - x) / mark.step];
    }),
  );
  if (counts.length === 0) return undefined;
  const agreed = (n: number) => counts.every((c) => Math.abs(c - n) < 1e-9);
  const whole = Math.round(counts[0] ?? Number.NaN);
  if (agreed(whole)) return whole;
  if (counts.every((c) => c > expected + 1e-9)) return Math.min(...counts);
  if (counts.every((c) => c < expected - 1e-9)) return Math.max(...counts);
  return undefined;
}

/** A count as a person reads it: whole, or to two decimals. */
export const executionCount = (n: number) => String(Number(n.toFixed(2)));

/**
 * What ran between `since` (a call that executed) and `probe` (a call without a key, one
 * execution): the executions beyond the probe's own, and the account of it, short and long.
 */
export function afterwards(counter: Counter, since: Shown, probe: Shown, label = 'the original') {
  const n = executionsBetween(counter, since, probe);
  const [from, to] = [reading(counter, since), reading(counter, probe)];
  return {
    extra: n === undefined ? undefined : n - 1,
    moved: `counter ${from} → ${to}, the call without a key alone`,
    account: `the counter went from ${from} (${label}) to ${to} (then a call without a key, one execution)`,
  };
}

/** What the counter says beyond the probe's own step: something executed, forwards or back. */
export function unexpected(extra: number): string {
  const size = Math.abs(extra);
  const steps = `${executionCount(size)} step${size === 1 ? '' : 's'}`;
  return `something executed (the counter moved ${steps} ${extra > 0 ? 'more' : 'less'} than the call without a key alone)`;
}
