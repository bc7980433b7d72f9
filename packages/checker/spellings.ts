// --- Writing arguments (and keys) the way a check needs them, byte for byte ---
//
// The same parsed value spelled another way (whitespace, key order, number and string spellings),
// a value that only looks the same (another Unicode normalisation form), and a different request
// (the first scalar changed). Keys get their other spellings too: each is another key.

import type { Args } from './run.js';
import { isObject } from './wire.js';

export interface Spelling {
  number?: (n: number) => string;
  string?: (s: string) => string;
  reverseKeys?: boolean;
  spaced?: boolean;
}

export function write(value: unknown, how: Spelling): string {
  if (typeof value === 'number') return how.number?.(value) ?? JSON.stringify(value);
  if (typeof value === 'string') return how.string?.(value) ?? JSON.stringify(value);
  const [comma, colon, open, close] = how.spaced ? [' ,\t', ' :  ', '{ ', ' }'] : [',', ':', '{', '}'];
  if (Array.isArray(value)) return `[${value.map((v) => write(v, how)).join(comma)}]`;
  if (!isObject(value)) return JSON.stringify(value);
  const members = Object.entries(value).map(([k, v]) => `${write(k, how)}${colon}${write(v, how)}`);
  return `${open}${(how.reverseKeys ? members.reverse() : members).join(comma)}${close}`;
}

/** Every value in `value` and every member name, depth first. */
export function* walk(value: unknown): Generator<unknown> {
  yield value;
  if (Array.isArray(value)) for (const v of value) yield* walk(v);
  if (isObject(value)) for (const [k, v] of Object.entries(value)) yield* [k, ...walk(v)];
}

export const some = (args: Args, test: (value: unknown) => boolean) => [...walk(args)].some(test);

/**
 * Three other spellings of the same number, each a retry of its own: `1` → `1.0`, `1e0`, `1.00`;
 * `1.5` → `1.50`, `1.5e0`, `1.500`; `1e+21` → `1E+21`, `1.0e+21`, `1e+021`. A server that
 * normalises one spelling by hand (stripping `.0`) still tells the others apart.
 */
export function respellings(n: number): [string, string, string] {
  const text = JSON.stringify(n);
  const [mantissa = text, exponent] = text.split('e');
  const point = mantissa.includes('.') ? mantissa : `${mantissa}.`;
  if (exponent !== undefined)
    return [
      `${mantissa}E${exponent}`,
      `${point}0e${exponent}`,
      `${mantissa}e${exponent.replace(/^([+-]?)/, '$10')}`,
    ];
  return [`${point}0`, `${text}e0`, `${point}00`];
}

/**
 * Other escapings of the same string, each a retry of its own: every UTF-16 unit as `\uXXXX`;
 * only the non-ASCII ones (`caf\u00e9` against `café`); those in upper-case hex.
 */
export const ESCAPINGS = [
  (s: string) =>
    escaped(
      s,
      () => true,
      (hex) => hex,
    ),
  (s: string) =>
    escaped(
      s,
      (unit) => unit > 0x7e,
      (hex) => hex,
    ),
  (s: string) =>
    escaped(
      s,
      (unit) => unit > 0x7e,
      (hex) => hex.toUpperCase(),
    ),
];

function escaped(s: string, which: (unit: number) => boolean, hexCase: (hex: string) => string): string {
  const units = Array.from({ length: s.length }, (_, i) => {
    const unit = s.charCodeAt(i);
    return which(unit)
      ? `\\u${hexCase(unit.toString(16).padStart(4, '0'))}`
      : JSON.stringify(s.charAt(i)).slice(1, -1);
  });
  return `"${units.join('')}"`;
}

/** The other Unicode normalisation form, where it differs: a distinct string once parsed. */
export const renormalise = (s: string) =>
  s.normalize('NFD') !== s ? s.normalize('NFD') : s.normalize('NFC');

/** The arguments with their first number, string or boolean changed: a different request. */
export function otherArguments(args: Args): Args | undefined {
  let changed = false;
  const change = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(change);
    if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, change(v)]));
    if (changed) return value;
    changed = ['number', 'string', 'boolean'].includes(typeof value);
    // Past 2^53 a number's successor is the same double: half of it is another number there.
    if (typeof value === 'number') return value + 1 !== value ? value + 1 : value / 2;
    return typeof value === 'string' ? `${value}-other` : typeof value === 'boolean' ? !value : value;
  };
  const result = change(args);
  return changed && isObject(result) ? result : undefined;
}

/**
 * Other spellings of one key, each a key of its own: the SEP's key is an opaque string, so a
 * server that folds case (a case-insensitive SQL collation) or trims it matches another operation.
 */
export const KEY_SPELLINGS: { how: string; spell: (key: string) => string }[] = [
  { how: 'in lower case', spell: (key) => key.toLowerCase() },
  { how: 'in upper case', spell: (key) => key.toUpperCase() },
  { how: 'between spaces', spell: (key) => ` ${key} ` },
];

/**
 * The first key the opacity check sends, and the ones it falls back to when a server refuses it
 * under limits of its own (UUIDs only, say): each has capitals, so that its lower case differs.
 */
export const opaqueBases = (uuid: string) => [`Key-${uuid.toUpperCase()}`, uuid.toUpperCase(), uuid];
