/**
 * The hot path's shared argument buffer, and the checks of the numbers
 * written into it.
 */
import native from './native';
import { invalidArgument } from './errors';

/**
 * The hot path's arguments. N-API charges about 40 ns an argument, so
 * `tryAcquire`, `settle`, `cancel` and `addOutput` write their numbers here
 * and call the addon with none (see `src/hot.rs`). Its own `ArrayBuffer`,
 * so its data never moves.
 */
export const ARGS = new Float64Array(new ArrayBuffer(8 * 8));
native.registerArgs(ARGS);

export function count(field: string, value: unknown): number {
  if (typeof value === 'number') return value;
  throw invalidArgument(field, value, 'must be a number');
}

export function optionalCount(field: string, value: unknown): number {
  return value === undefined ? 0 : count(field, value);
}
