// --- Reading the effect: the counter a result shows, and how many executions moved it ---
//
// A check never takes an answer's word for whether something executed: it reads a number the
// tool's result shows (a balance, a count) and divides how far it moved by how far one execution
// moves it. Results read the way real ones do: the text may name the caller ("Charged 1 usd to
// bob"), show a per-account balance beside a global count, or move one number by the amount
// charged. So each counting number is found again by its label (the word before it) and by its
// position, and a verdict is given whenever every reading that can be made agrees. Read as a person
// reads them: `structuredContent` before the text, `1,000` as one thousand, and a number that moved
// by a fraction of its step, or backwards, set aside as no count of executions (a timestamp, a
// count of someone else's traffic) when another number gives a whole count.

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
  /** What `option` found in the baseline's last result (`Balance: 2`), for the report. */
  found?: string;
}

/**
 * A number as a result's text writes it: `-3`, `1.5`, and with its thousands grouped (`1,000`,
 * `12 345` with a no-break space), read as one number, not two.
 */
const NUMBER = /-?\d{1,3}(?:[,\u00a0\u202f]\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?/g;
/** The value of a number as the text writes it, its grouping left out. */
const numberValue = (text: string) => Number(text.replace(/[,\u00a0\u202f]/g, ''));
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
    entries.push([(LABEL.exec(before)?.[0] ?? '').replace(/\s+/g, ' ').trim(), numberValue(match[0])]);
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

/** What `--counter` finds in a result: its number and the text it read it from, or what is there instead. */
type Found = { value: number; text: string } | { missing: string };

/** The value a JSON pointer (RFC 6901) names in `value`, or undefined if it names nothing. */
function resolve(pointer: string, value: unknown): unknown {
  let at = value;
  for (const token of pointer.split('/').slice(1)) {
    const name = token.replaceAll('~1', '/').replaceAll('~0', '~');
    if (Array.isArray(at) && /^(0|[1-9]\d*)$/.test(name)) at = at[Number(name)];
    else if (isObject(at) && Object.hasOwn(at, name)) at = at[name];
    else return undefined;
  }
  return at;
}

/** Up to 80 characters of `text`, marked where they are cut. */
const cut = (text: string) => (text.length > 80 ? `${text.slice(0, 79)}…` : text);
const quoted = (text: string) => JSON.stringify(cut(text));

function find(option: CounterOption, shown: Shown): Found {
  if ('pointer' in option) {
    const structured = isObject(shown.value) ? shown.value.structuredContent : undefined;
    if (structured === undefined)
      return {
        missing: `the result has no structuredContent (a pattern reads its text, ${quoted(textOf(shown.value))})`,
      };
    const value = resolve(option.pointer, structured);
    if (typeof value === 'number') return { value, text: `${option.pointer} = ${value}` };
    const numbers = structuredSpots(shown).map((spot) => spot.label);
    const there = `(its numbers: ${numbers.join(', ') || 'none'})`;
    if (value === undefined) return { missing: `nothing at ${option.pointer} in structuredContent ${there}` };
    return {
      missing: `${option.pointer} in structuredContent is ${cut(JSON.stringify(value))}, not a number ${there}`,
    };
  }
  const text = textOf(shown.value);
  const match = option.pattern.exec(text);
  if (!match) return { missing: `it matches nothing in the result's text, ${quoted(text)}` };
  // The first group is the number; a pattern without one is all number.
  const [whole, group] = match;
  const read = group ?? whole;
  const value = numberValue(read);
  if (read.trim() !== '' && Number.isFinite(value)) return { value, text: whole };
  if (group === undefined)
    return {
      missing: `it matches ${quoted(whole)}, not a number: the number goes in the pattern's first group, such as (\\d+)`,
    };
  return { missing: `its first group matches ${quoted(group)} in ${quoted(whole)}, not a number` };
}

const optionValue = (option: CounterOption, shown: Shown) => {
  const found = find(option, shown);
  return 'value' in found ? found.value : undefined;
};

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
 * that moved in `structuredContent` (the values a program reads), or else in the text. An error
 * shows no counter.
 */
export function counterOf(first: Shown, second: Shown, option?: CounterOption): Counter | undefined {
  if (first.kind === 'error' || second.kind === 'error') return undefined;
  if (option) {
    const [a, b] = [find(option, first), find(option, second)];
    if (!('value' in a) || !('value' in b) || a.value === b.value) return undefined;
    const marks = [{ label: '', index: 0, step: b.value - a.value }];
    return { source: 'option', marks, shown: 1, option, found: b.text };
  }
  for (const [source, spots] of [
    ['structuredContent', structuredSpots],
    ['text', textSpots],
  ] as const) {
    const [a, b] = [spots(first), spots(second)];
    const marks = moved(a, b);
    if (marks.length > 0) return { source, marks, shown: a.length };
  }
  return undefined;
}

/** Why `--counter` read no counter from two executions (two calls without a key), in words. */
export function optionMissed(option: CounterOption, first: Shown, second: Shown): string {
  const [a, b] = [find(option, first), find(option, second)];
  const missed = 'missing' in a ? a : 'missing' in b ? b : undefined;
  if (missed) return `--counter ${optionText(option)}: ${missed.missing}`;
  const value = 'value' in a ? a.value : '?';
  return `--counter ${optionText(option)} reads ${value} in both calls without a key: a number that does not move at each execution counts nothing`;
}

/** The option as the user wrote it: the pointer, or the pattern in quotes (no JSON escaping). */
const optionText = (option: CounterOption) =>
  'pointer' in option ? option.pointer : `"${option.pattern.source}"`;

const steps = (marks: Mark[]) => marks.map((mark) => mark.step).join(', ');

/** One counting number, in words: `the number after "Balance:"`, `number 2`, `structuredContent /balance`. */
function markName(counter: Counter, mark: Mark): string {
  if (counter.option) return `the number --counter ${optionText(counter.option)} reads`;
  if (counter.source === 'structuredContent') return `structuredContent ${mark.label}`;
  return mark.label ? `the number after "${mark.label.replace(/@\d+$/, '')}"` : `number ${mark.index + 1}`;
}

/** Which numbers the counter is, in words, for the report. */
export function describeCounter(counter: Counter): string {
  const { marks, option } = counter;
  const by = `${marks.length === 1 ? 'step' : 'steps'} ${steps(marks)}`;
  if (option && 'pointer' in option)
    return `structuredContent ${option.pointer}, as --counter names it (${by})`;
  if (option)
    return `the number --counter ${optionText(option)} matches in the result's text (${quoted(counter.found ?? '')}, ${by})`;
  if (counter.source === 'structuredContent')
    return `${marks.map((mark) => markName(counter, mark)).join(' and ')} (${by})`;
  return `${marks.map((mark) => markName(counter, mark)).join(' and ')} in the result's text (${by})`;
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

/** What each reading says ran between two results: each counting number, found by its label and by its position. */
function countsBetween(counter: Counter, from: Shown, to: Shown): { mark: Mark; count: number }[] {
  const [a, b] = [spotsOf(counter, from), spotsOf(counter, to)];
  return counter.marks.flatMap((mark) =>
    (['label', 'position'] as const).flatMap((by) => {
      const [x, y] = [valueAt(counter, mark, a, by), valueAt(counter, mark, b, by)];
      return x === undefined || y === undefined ? [] : [{ mark, count: (y - x) / mark.step }];
    }),
  );
}

const near = (a: number, b: number) => Math.abs(a - b) < 1e-9;

/** A reading a counter can give: a whole number of executions. */
const whole = (count: number) => near(count, Math.round(count));

/**
 * The readings that count executions: whole ones, and of those the ones that went forwards when
 * any did. A number that moved by a fraction of its step counts something else (a clock, other
 * users' traffic), and so does one that went back while another counted on; one that went back
 * alone still says something ran (a refund takes a balance back).
 */
function counting(counts: number[]): number[] {
  const wholes = counts.filter(whole);
  const forwards = wholes.filter((count) => count > -1e-9);
  return forwards.length > 0 ? forwards : wholes;
}

/**
 * How many executions moved the counter from `from` to `to`, as every reading that counts says
 * (`counting`): the count when they all agree. When they differ (one number moves by the amount
 * charged, another by one; a refund takes a balance back while a count goes on) but none of them
 * says `expected`, every reading says that something else ran, and that is the verdict: the count
 * is the reading nearest `expected` (on a tie, the one above it: one execution more). Undefined
 * when some readings say `expected` and others do not, or none counts (`noCount` says which).
 */
export function executionsBetween(
  counter: Counter,
  from: Shown,
  to: Shown,
  expected = 1,
): number | undefined {
  const all = countsBetween(counter, from, to).map(({ count }) => count);
  // Readings that are no count of executions are set aside while another reading is one; when
  // none is, there is no verdict to give (`noCount` says why, and names --counter).
  const counts = counting(all);
  const [first] = counts;
  if (first === undefined) return undefined;
  if (counts.every((c) => near(c, Math.round(first)))) return Math.round(first);
  if (counts.some((c) => near(c, expected))) return undefined;
  const nearest = (a: number, b: number) => {
    const [da, db] = [Math.abs(a - expected), Math.abs(b - expected)];
    return near(da, db) ? Math.max(a, b) : da < db ? a : b;
  };
  return counts.reduce(nearest);
}

/**
 * Why `from` and `to` give no count (`executionsBetween` is undefined): what each number said, or
 * that none could be read; `account` says what was read. For a "not checkable" line.
 */
export function noCount(counter: Counter, from: Shown, to: Shown, account: string): string {
  const said = new Map<string, Set<string>>();
  for (const { mark, count } of countsBetween(counter, from, to)) {
    const name = markName(counter, mark);
    said.set(name, (said.get(name) ?? new Set()).add(executionCount(count)));
  }
  if (said.size === 0) return `the counter could not be read: ${account}`;
  const each = [...said].map(([name, counts]) => {
    const plural = counts.size === 1 && counts.has('1') ? '' : 's';
    return `${name} says ${[...counts].join(' or ')} execution${plural}`;
  });
  if (countsBetween(counter, from, to).every(({ count }) => !whole(count)))
    return `no number moved by a whole number of its steps (${each.join(', ')}): ${account}; a number that moves by fractions, or backwards, counts something else; name the one that counts executions with --counter`;
  return `the counter's numbers disagree (${each.join(', ')}): ${account}; if one of them counts only these calls, name it with --counter`;
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
