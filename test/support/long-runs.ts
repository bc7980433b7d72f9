// SEP3182_LONG=1 runs the random tests (programs, mutations) ten times over, and gives them ten
// times the time: the nightly depth, which every run of the suite cannot afford.

const LONG = process.env.SEP3182_LONG === '1';

/** `count` (of runs, or milliseconds for them) in an ordinary run; ten times it in a long one. */
export const longRunScaled = (count: number): number => (LONG ? 10 * count : count);
