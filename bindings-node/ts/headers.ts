/**
 * Headers in every shape callers hold them (a fetch `Headers`, a plain
 * object, an array of pairs), flattened to `[name, value, …]`, the one shape
 * the addon reads.
 */
import { invalidArgument } from './errors';

/** Headers as a fetch `Headers`, a record, or `[name, value]` pairs. */
export type HeadersLike =
  | { forEach(callback: (value: string, name: string) => void): void }
  | Record<string, string | string[] | number | undefined | null>
  | Iterable<readonly [string, string]>;

/** `[name, value, name, value, …]`. */
export function flattenHeaders(headers: HeadersLike | undefined | null): string[] {
  const flat: string[] = [];
  if (headers === undefined || headers === null) return flat;
  if (typeof headers !== 'object') throw invalidArgument('headers', headers, 'must be a Headers, an object or pairs');
  if (typeof (headers as any).forEach === 'function' && !Array.isArray(headers)) {
    (headers as { forEach(cb: (v: string, k: string) => void): void }).forEach((value, name) => {
      flat.push(name, String(value));
    });
    return flat;
  }
  if (Symbol.iterator in headers) {
    for (const pair of headers as Iterable<readonly [string, string]>) {
      if (!Array.isArray(pair) || pair.length !== 2) {
        throw invalidArgument('headers', JSON.stringify(pair), 'pairs must be [name, value]');
      }
      flat.push(String(pair[0]), String(pair[1]));
    }
    return flat;
  }
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || value === null) continue;
    if (Array.isArray(value)) for (const v of value) flat.push(name, String(v));
    else flat.push(name, String(value));
  }
  return flat;
}
