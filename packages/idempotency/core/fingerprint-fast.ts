// --- The fingerprint's fast path: RFC 8785 written by JSON.stringify itself ---
//
// JSON.stringify writes strings and numbers exactly as RFC 8785 does; what it does not do is sort
// members. Given an array of property names, though, it writes every object's members in that
// array's order: so for a value made only of plain objects, arrays, finite numbers, well-formed
// strings, booleans and null, JSON.stringify(value, sortedNamesOfAllItsObjects) is its canonical
// form, at native speed. One walk checks that the value is such a value and gathers the names;
// anything else is left to `canonicalJson` in fingerprint.ts, the plain writer, which refuses or
// writes it. What this path writes is always what the plain writer writes
// (test/idempotency/core/fingerprint-fast.test.ts); why it exists, and what it saves, is in docs/cost.md.

/**
 * Names past this many make the native writer look each one up on every object: the full
 * writer's cost grows with the members there are, not with the names times the objects.
 */
const MAX_NATIVE_NAMES = 64;

/** Deeper than arguments are nested in practice, and short of any stack. */
const MAX_NATIVE_DEPTH = 64;

/**
 * Below this many members, arguments whose members are out of order go to the plain writer:
 * JSON.stringify given names takes V8's slower path, which pays only on larger arguments.
 */
const MIN_MEMBERS_FOR_NAMES = 256;

/** What a walk of the arguments found: their objects' names, whether each object's are in order. */
interface Walk {
  names: Set<string>;
  inOrder: boolean;
  members: number;
}

/** The canonical form of `value` if JSON.stringify can write it (see above), else undefined. */
export function nativelyCanonical(value: unknown): string | undefined {
  // A `toJSON` somebody put on every object or array would be called by both writers, differently.
  if ('toJSON' in Object.prototype || 'toJSON' in Array.prototype) return undefined;
  const walk: Walk = { names: new Set(), inOrder: true, members: 0 };
  if (!isNativelyWritten(value, walk, 0)) return undefined;
  // Members already in canonical order need no names: V8's fastest path writes them as they are.
  if (walk.inOrder) return JSON.stringify(value);
  if (walk.members < MIN_MEMBERS_FOR_NAMES || walk.names.size > MAX_NATIVE_NAMES) return undefined;
  // The default sort compares UTF-16 code units, RFC 8785's order.
  return JSON.stringify(value, [...walk.names].sort());
}

/** Whether JSON.stringify writes `value` as RFC 8785 does, given its objects' names (see `Walk`). */
function isNativelyWritten(value: unknown, walk: Walk, depth: number): boolean {
  switch (typeof value) {
    case 'string':
      return value.isWellFormed();
    case 'number':
      return Number.isFinite(value);
    case 'boolean':
      return true;
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth > MAX_NATIVE_DEPTH) return false;
  if (Array.isArray(value)) {
    // A hole, or an undefined the plain writer turns into null, fails as not natively written.
    for (let i = 0; i < value.length; i++) if (!isNativelyWritten(value[i], walk, depth + 1)) return false;
    return true;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return false;
  const keys = Object.keys(value);
  // JSON.stringify reads a listed name whether or not it is enumerable; the plain writer, only if it is.
  if (Object.getOwnPropertyNames(value).length !== keys.length) return false;
  let previous: string | undefined;
  for (const key of keys) {
    // `__proto__` read on an object without it of its own is Object.prototype, an object.
    if (key === '__proto__' || !key.isWellFormed()) return false;
    if (!isNativelyWritten(Reflect.get(value, key), walk, depth + 1)) return false;
    if (previous !== undefined && previous > key) walk.inOrder = false;
    previous = key;
    walk.names.add(key);
  }
  walk.members += keys.length;
  return true;
}
